"""The instances' pages: the changelist and change page, the add form (a create
through the services), the start/stop/delete/extend actions, live pages and history.

Every change goes through ``containers.requests.services`` (actor ``user:<username>``);
nothing here assigns a status or deletes a row. Django's delete view and
``delete_selected`` are off for instances: removing a row there would orphan a
container. The changelist uses ``list_select_related`` so a page costs the same number
of queries however many rows it shows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe

from containers import selectors
from containers.admin import views as admin_views
from containers.admin.common import RedactedFieldsMixin, actor_of, json_block, listed
from containers.admin.display import (
    container_line,
    history_url,
    instance_status_cell,
    presence_line,
    time_ago,
)
from containers.admin.fields import EnvRowsField
from containers.admin.runtimes import engine_health_badge
from containers.admin.views import EVENTS_SHOWN
from containers.engines import calls
from containers.errors import InvalidSpec
from containers.models import (
    ContainerInstance,
)
from containers.requests.extensions import container_extend
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from containers.spec import redaction
from containers.spec.policies import policy_status
from containers.spec.resolve import (
    user_env_for,
)
from containers.states import NOTHING_TO_DO, OFFERED
from core.admin_helpers import ActionsOnlyAdminMixin
from core.admin_lists import FlatChangelistMixin, related_filter
from core.errors import DomainError
from core.ids import uuid_prefix


class InstanceCreateForm(forms.ModelForm):
    """The add form: which template, for whom, under what name, with which env overrides.
    The overrides are judged by the template's env policy here (``user_env_for``, as the
    API's create is), so a refused key is an error on the form; the service does the rest."""

    name = forms.CharField(
        max_length=128,
        required=False,
        help_text="Leave empty for the template name plus a short id.",
    )
    env = EnvRowsField(
        help_text="Env for this instance, a row per variable: only the keys the template's "
        "user_env lets users set (a key the template sets itself only if a rule names it "
        "exactly). Values are literal: $VARIABLES are not expanded."
    )

    class Meta:
        model = ContainerInstance
        fields = ["template", "owner", "name"]

    def clean(self):
        cleaned = super().clean()
        template, env = cleaned.get("template"), cleaned.get("env")
        if template is not None and env and "env" not in self.errors:
            try:
                cleaned["env"] = user_env_for(template, env)
            except InvalidSpec as exc:
                self.add_error("env", exc.message)
        return cleaned


ADD_FIELDS = ("template", "owner", "name", "env")


class ChangedWithinFilter(admin.SimpleListFilter):
    """Instances whose status changed within the last hour or day (the admin index's
    "failed in the last hour" links here with ``status__exact=failed&changed=1h``)."""

    title = "status changed"
    parameter_name = "changed"
    WINDOWS = {"1h": dt.timedelta(hours=1), "24h": dt.timedelta(hours=24)}

    def lookups(self, request, model_admin):
        return (("1h", "in the last hour"), ("24h", "in the last 24 hours"))

    def queryset(self, request, queryset):
        window = self.WINDOWS.get(self.value())
        if window is None:
            return queryset
        return queryset.filter(status_changed_at__gte=timezone.now() - window)


@admin.register(ContainerInstance)
class ContainerInstanceAdmin(
    FlatChangelistMixin, RedactedFieldsMixin, ActionsOnlyAdminMixin, admin.ModelAdmin
):
    """Instances. Created through the create service; changed only by the actions."""

    add_form = InstanceCreateForm
    list_display = (
        "name",
        "short_id",
        "status_display",
        "changed",
        "image",
        "template",
        "runtime",
        "owner",
    )
    # Owners and templates are typed in (core.admin_lists), never listed: thousands of
    # them would be the page. Engines are a fleet, listed.
    list_filter = (
        "status",
        ChangedWithinFilter,
        related_filter("template", name_field="name", title="template"),
        "runtime",
        related_filter("owner", name_field="username", title="owner"),
    )
    list_select_related = ("template", "runtime", "owner")
    search_fields = ("name",)  # and an id prefix: get_search_results
    search_help_text = "A name, or an id: the full uuid or its first 8 or more hex digits."
    ordering = ("-created_at",)
    actions = ("start_instances", "stop_instances", "delete_instances", "extend_instances")
    readonly_fields = (
        "status_display",
        "history_link",
        "container_display",
        "missing_display",
        "engine_health",
        "policy_display",
        "placement_reason",
    )
    fieldsets = (
        (None, {"fields": ("name", "id", "status_display", "status_reason", "history_link")}),
        (
            "Placement",
            {
                "fields": (
                    "template",
                    "runtime",
                    "placement_reason",
                    "engine_health",
                    "owner",
                    "runtime_node_name",
                )
            },
        ),
        (
            "Container",
            {"fields": ("container_display", "missing_display", "exit_code", "spec")},
        ),
        (
            "Times",
            {"fields": ("created_at", "status_changed_at", "started_at", "finished_at")},
        ),
        ("Policies", {"fields": ("policy_display",)}),
    )
    change_form_template = "admin/containers/containerinstance/change_form.html"
    redacted_fields = {"spec": "spec_shown", "status_reason": "status_reason_shown"}

    class Media:
        # Refreshes the list in place (polls live/ below) and the page (its stream/ of
        # server-sent events); a local file.
        js = ("containers/live.js",)
        css = {"all": ("containers/console.css",)}

    # -- display ------------------------------------------------------------------------------

    @admin.display(description="spec")
    def spec_shown(self, obj: ContainerInstance):
        return json_block(redaction.spec_for(self.page_user(), obj.spec or {}))

    @admin.display(description="lifecycle policies")
    def policy_display(self, obj: ContainerInstance):
        """When a policy stops or deletes it and why, and what may be extended (the same
        words as the API's ``policy``)."""
        shown = policy_status(obj, self.page_user())
        lines = []
        if shown.stop_at is not None:
            lines.append(f"Stopped at {shown.stop_at:%Y-%m-%d %H:%M:%S %Z}: {shown.stop_reason}")
        if shown.delete_at is not None:
            lines.append(
                f"Deleted at {shown.delete_at:%Y-%m-%d %H:%M:%S %Z} (delete_stopped_after)"
            )
        if shown.extendable:
            lines.append(
                f"Its time limit may be extended by up to {shown.extend_left} s more "
                "(action: Extend time limit by one hour)."
            )
        if not lines:
            return "Nothing due: no policy stops or deletes it."
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))

    @admin.display(description="status reason")
    def status_reason_shown(self, obj: ContainerInstance):
        user = self.page_user()
        return (
            obj.status_reason if redaction.sees_hosts(user) else redaction.scrub(obj.status_reason)
        )

    @admin.display(description="status", ordering="status")
    def status_display(self, obj: ContainerInstance):
        return instance_status_cell(obj)

    @admin.display(description="id")
    def short_id(self, obj: ContainerInstance):
        return format_html(
            '<code title="{}">{}</code>', obj.id, str(obj.id)[: selectors.SHORT_ID_LENGTH]
        )

    @admin.display(description="changed", ordering="status_changed_at")
    def changed(self, obj: ContainerInstance):
        return time_ago(obj.status_changed_at)

    @admin.display(description="image", ordering="template__image")
    def image(self, obj: ContainerInstance):
        return format_html('<span class="gb-cut" title="{0}">{0}</span>', obj.template.image)

    @admin.display(description="history")
    def history_link(self, obj: ContainerInstance):
        return format_html('<a href="{}">full event history</a>', history_url(obj.id))

    @admin.display(description="container")
    def container_display(self, obj: ContainerInstance):
        return container_line(obj)

    @admin.display(description="on the engine")
    def missing_display(self, obj: ContainerInstance):
        return presence_line(obj)

    @admin.display(description="engine answers")
    def engine_health(self, obj: ContainerInstance):
        return engine_health_badge(obj.runtime)

    def get_search_results(self, request, queryset, search_term):
        """Names as Django searches them, and ids in the API's and the CLI's one form: the
        full uuid or a prefix of at least 8 hex digits, dashed or not (``core.ids``)."""
        rows, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        prefix = uuid_prefix(search_term)
        if prefix is not None:
            rows |= queryset.filter(id__startswith=prefix)
        return rows, may_have_duplicates

    # -- add: through container_create_by_template --------------------------------------------

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return ((None, {"fields": ADD_FIELDS}),)
        return super().get_fieldsets(request, obj)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = self.add_form
            kwargs["fields"] = list(ADD_FIELDS)
        return super().get_form(request, obj, change, **kwargs)

    def get_changeform_initial_data(self, request):
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("owner", request.user.pk)
        return initial

    def save_model(self, request, obj, form, change) -> None:
        """Add: ask the create service (a refusal is reported, not raised). Change: nothing."""
        if change:
            return
        try:
            created = container_create_by_template(
                template=form.cleaned_data["template"],
                owner=form.cleaned_data["owner"],
                actor=actor_of(request),
                name=form.cleaned_data.get("name") or None,
                env=form.cleaned_data.get("env") or None,
            )
        except DomainError as exc:
            # Operators are shown the host path a refused mount names (users never are).
            obj._refusal = getattr(exc, "operator_message", exc.message)
            return
        obj.id, obj.name, obj.runtime = created.id, created.name, created.runtime

    def log_addition(self, request, obj, message):
        if getattr(obj, "_refusal", None):
            return None
        return super().log_addition(request, obj, message)

    def response_add(self, request, obj, post_url_continue=None):
        refusal = getattr(obj, "_refusal", None)
        if refusal:
            self.message_user(request, f"Create refused: {refusal}", messages.ERROR)
            again = {k: request.POST.get(k, "") for k in ("template", "owner", "name")}
            return HttpResponseRedirect(f"{request.path}?{urlencode(again)}")
        self.message_user(
            request, f"Create of {obj.name} queued: it starts when a slot is free.", messages.INFO
        )
        return super().response_add(request, obj, post_url_continue)

    # -- the change page: history, logs and the action buttons --------------------------------

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        instance = self.get_object(request, object_id)
        if instance is not None:
            logs, logs_problem = calls.container_logs_for_console(instance=instance)
            logs = redaction.logs_for(request.user, instance.spec, logs)
            extra_context.update(
                events=list(selectors.instance_events(instance=instance)[:EVENTS_SHOWN]),
                history_url=history_url(instance.id),
                logs=logs,
                logs_problem=logs_problem,
                can_operate=self.has_change_permission(request),
                offered={verb: instance.status in OFFERED[verb] for verb in OFFERED},
                changelist_url=reverse("admin:containers_containerinstance_changelist"),
            )
        return super().change_view(request, object_id, form_url, extra_context)

    def history_view(self, request, object_id, extra_context=None):
        """Django's change history is empty here (changes go through services): the
        instance's event history is the real one."""
        return HttpResponseRedirect(history_url(object_id))

    # -- actions: a service call per row, one summary per outcome ------------------------------

    def _back(self, request):
        back = request.POST.get("_next", "")
        if back and url_has_allowed_host_and_scheme(back, {request.get_host()}):
            return HttpResponseRedirect(back)
        return None

    def _request_each(self, request, queryset, *, service: Callable, verb: str):
        """Ask ``service`` for every selected row that is not already where ``verb`` leads,
        then report three lines at most: requested, nothing to do, refused (with reasons)."""
        done, nothing, refused = [], [], []
        rows = queryset.order_by("name", "id").values_list("id", "name", "status")
        for instance_id, name, status in rows:
            if status in NOTHING_TO_DO[verb]:
                nothing.append(f"{name} ({status})")
                continue
            try:
                result = service(instance_id=instance_id, actor=actor_of(request))
            except DomainError as exc:
                refused.append(f"{name}: {exc.message}")
                continue
            (done if result.queued else nothing).append(
                name if result.queued else f"{name} ({result.instance.status})"
            )
        if done:
            self.message_user(
                request, f"{verb.capitalize()} requested for {listed(done)}.", messages.SUCCESS
            )
        if nothing:
            self.message_user(request, f"Nothing to {verb} for {listed(nothing)}.", messages.INFO)
        if refused:
            self.message_user(
                request, f"{verb.capitalize()} refused for {listed(refused)}.", messages.WARNING
            )
        return self._back(request)

    @admin.action(description="Start selected instances", permissions=["change"])
    def start_instances(self, request, queryset):
        return self._request_each(request, queryset, service=container_start, verb="start")

    @admin.action(description="Stop selected instances", permissions=["change"])
    def stop_instances(self, request, queryset):
        return self._request_each(request, queryset, service=container_stop, verb="stop")

    @admin.action(description="Extend time limit by one hour", permissions=["change"])
    def extend_instances(self, request, queryset):
        """``container_extend`` of each selected row by an hour, within what its template
        allows; the refusals are reported with their reasons."""
        done, refused = [], []
        for instance_id, name in queryset.order_by("name", "id").values_list("id", "name"):
            try:
                container_extend(
                    instance_id=instance_id, user=request.user, seconds=3600,
                    actor=actor_of(request),
                )  # fmt: skip
            except DomainError as exc:
                refused.append(f"{name}: {exc.message}")
                continue
            done.append(name)
        if done:
            self.message_user(request, f"Extended by an hour: {listed(done)}.", messages.SUCCESS)
        if refused:
            self.message_user(
                request, f"Extension refused for {listed(refused)}.", messages.WARNING
            )
        return self._back(request)

    @admin.action(
        description="Delete selected instances (stop and remove the container)",
        permissions=["change"],
    )
    def delete_instances(self, request, queryset):
        """First a page that lists what will be removed; the delete runs on its "yes"."""
        if request.POST.get("confirm") != "yes":
            return self._confirm_delete(request, queryset)
        return self._request_each(request, queryset, service=container_delete, verb="delete")

    def _confirm_delete(self, request, queryset):
        rows = list(queryset.select_related("runtime", "template", "owner").order_by("name"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Delete instances?",
            "opts": self.model._meta,
            "rows": rows,
            "deletable": [row for row in rows if row.status in OFFERED["delete"]],
            "already": [row for row in rows if row.status in NOTHING_TO_DO["delete"]],
            "others": [
                row for row in rows if row.status not in OFFERED["delete"] | NOTHING_TO_DO["delete"]
            ],
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "next": request.POST.get("_next", ""),
        }
        return TemplateResponse(
            request, "admin/containers/containerinstance/delete_confirmation.html", context
        )

    # -- the queue dashboard lives under this admin's URLs ------------------------------------

    def get_urls(self):
        dashboard = self.admin_site.admin_view(partial(admin_views.queue_dashboard, admin=self))
        live = self.admin_site.admin_view(partial(admin_views.instance_live, admin=self))
        dashboard_stream = self.admin_site.admin_view(
            partial(admin_views.queue_dashboard_stream, admin=self)
        )
        stream = self.admin_site.admin_view(partial(admin_views.instance_stream, admin=self))
        return [
            path("dashboard/", dashboard, name="containers_dashboard"),
            path("dashboard/stream/", dashboard_stream, name="containers_dashboard_stream"),
            path("live/", live, name="containers_containerinstance_live"),
            path("<uuid:object_id>/stream/", stream, name="containers_containerinstance_stream"),
            *super().get_urls(),
        ]
