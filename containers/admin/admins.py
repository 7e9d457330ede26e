"""The operator console: instances, templates, runtimes, history, orphans, the dashboard.

Every change goes through ``containers.requests.services`` (actor ``user:<username>``); nothing
here assigns a status or deletes a row. Django's delete view and ``delete_selected`` are
off for instances and their history: removing a row there would orphan a container or
erase what happened. Changelists use ``list_select_related`` so a page costs the same
number of queries however many rows it shows.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import threading
from collections.abc import Callable
from functools import partial
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe

from containers import selectors
from containers.actors import user_actor
from containers.admin import views as admin_views
from containers.admin.display import (
    container_line,
    history_url,
    instance_status_cell,
    presence_line,
    status_badge,
    time_ago,
)
from containers.admin.fields import CommandField, EnvRowsField, VolumeRowsField
from containers.admin.runtimes import RuntimeFleetMixin
from containers.admin.views import EVENTS_SHOWN
from containers.engines import calls, fake_driver_allowed
from containers.errors import InvalidSpec
from containers.execution.health import runtime_health_check
from containers.execution.housekeeping import orphan_remove
from containers.execution.images import template_images_refresh
from containers.fleet import runtimes
from containers.models import (
    ContainerEvent,
    ContainerInstance,
    ContainerTemplate,
    OrphanContainer,
    Runtime,
)
from containers.queues import EVENT_KIND_WORDS, event_kind_display
from containers.requests.extensions import container_extend
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from containers.spec import env_policy, redaction
from containers.spec.policies import POLICY_FIELDS, policy_status, template_policy_check
from containers.spec.resolve import (
    check_volume_roots,
    clean_template_fields,
    clean_volumes,
    user_env_for,
)
from containers.spec.template_services import JSON_FIELDS, WRITABLE, template_kubernetes_check
from containers.states import NOTHING_TO_DO, OFFERED
from core.admin_helpers import GREY, ActionsOnlyAdminMixin, ReadOnlyAdminMixin, badge
from core.admin_lists import FlatChangelistMixin, choices_filter, related_filter, value_filter
from core.errors import DomainError
from core.ids import uuid_prefix
from outbox import admin as outbox_admin

IMAGE_COLOURS = {"present": "#198754", "missing": "#dc3545", "unknown": "#6c757d"}


def _listed(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    count = f"{len(items)} instance{'s' if len(items) != 1 else ''}"
    return f"{count}: {shown}{more}"


def actor_of(request) -> str:
    return user_actor(request.user)


@outbox_admin.register_history_link
def _outbox_history_link(event) -> str | None:
    """Outbox rows of container requests link to their instance's history."""
    return history_url(event.aggregate_id) if event.kind.startswith("Container") else None


# --- instances -------------------------------------------------------------------------------


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


_page = threading.local()  # the user a change page is being drawn for (one per thread)


class RedactedFieldsMixin:
    """Fields that can hold secret env values or host paths are drawn, for a viewer who may
    not see them, through ``containers.spec.redaction`` (the rule the API applies):
    ``redacted_fields`` maps each such field to the display method that replaces it."""

    redacted_fields: dict[str, str] = {}

    def redacts(self, request, obj) -> bool:
        return not (redaction.sees_secrets(request.user) and redaction.sees_hosts(request.user))

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not self.redacts(request, obj):
            return fieldsets
        swap = self.redacted_fields
        return [
            (name, {**opts, "fields": tuple(swap.get(f, f) for f in opts["fields"])})
            for name, opts in fieldsets
        ]

    def get_readonly_fields(self, request, obj=None):
        return (*super().get_readonly_fields(request, obj), *self.redacted_fields.values())

    @staticmethod
    def page_user():
        """The user the change page is being drawn for (``None`` outside one)."""
        return getattr(_page, "user", None)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        _page.user = request.user
        try:
            return super().change_view(request, object_id, form_url, extra_context)
        finally:
            _page.user = None


def _json_block(value) -> str:
    return format_html(
        '<pre style="white-space:pre-wrap">{}</pre>', json.dumps(value, indent=2, sort_keys=True)
    )


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
        return _json_block(redaction.spec_for(self.page_user(), obj.spec or {}))

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
                request, f"{verb.capitalize()} requested for {_listed(done)}.", messages.SUCCESS
            )
        if nothing:
            self.message_user(request, f"Nothing to {verb} for {_listed(nothing)}.", messages.INFO)
        if refused:
            self.message_user(
                request, f"{verb.capitalize()} refused for {_listed(refused)}.", messages.WARNING
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
            self.message_user(request, f"Extended by an hour: {_listed(done)}.", messages.SUCCESS)
        if refused:
            self.message_user(
                request, f"Extension refused for {_listed(refused)}.", messages.WARNING
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


# --- templates -------------------------------------------------------------------------------


class ContainerTemplateForm(forms.ModelForm):
    """Validates the JSON fields with the same rules the create service applies.

    The command is typed as text, env and volumes as rows (``containers.admin.fields``);
    a volume source must be able to lie inside ``allowed_volume_roots`` now, at save, not
    first when an instance is created (``check_volume_roots``).
    """

    command = CommandField(
        help_text="The words the container runs, such as <code>sleep 600</code>: split as a "
        "shell splits them (quotes group words) and stored as a list; no shell runs them, "
        "so for pipes, redirections or <code>&amp;&amp;</code> type <code>sh -c '...'</code>. "
        "Empty: the image's own command."
    )
    env = EnvRowsField(
        help_text="A row per variable: its name (letters, digits and <code>_</code>, not "
        "starting with a digit) and its value; an empty row is dropped."
    )
    volumes = VolumeRowsField(
        help_text="A row per volume: the source is <code>$WORKSPACE_PATH</code> (the owner's "
        "workspace) or a host path inside the allowed volume roots, the target an absolute "
        "path in the container; an empty row is dropped."
    )

    class Meta:
        model = ContainerTemplate
        fields = list(WRITABLE)
        help_texts = {
            "resources": "A JSON object with cpu (cores), memory (bytes or a size such as "
            '256m) and pids (processes), each optional; e.g. <code>{"cpu": 0.5, '
            '"memory": "256m"}</code>. Empty: no limits.',
            "constraints": "A JSON object of runtime label names to the values a runtime "
            'must have; e.g. <code>{"zone": "eu-1"}</code>. Empty: any runtime.',
            "security": "Overrides of config.yml's container.security: user (owner, image, a "
            'uid or "uid:gid"), cap_add (from capabilities_allowed), read_only_rootfs, network '
            '(bridge, none, owner), runtime (from runtimes_allowed); e.g. <code>{"user": '
            '"owner", "network": "none"}</code>. Empty: the configuration applies.',
        }

    def clean(self):
        cleaned = super().clean()
        for name in ("image", *JSON_FIELDS):
            if name not in cleaned:  # already invalid JSON, or not on the form
                continue
            try:
                normal = clean_template_fields(**{name: cleaned[name]})
            except InvalidSpec as exc:
                self.add_error(name, exc.message)
                continue
            if name == "command":
                cleaned["command"] = normal["command"]  # a list, however it was typed
        if "volumes" in cleaned and "volumes" not in self.errors:
            roots = settings.GOBRAVE["container"]["allowed_volume_roots"]
            try:
                cleaned["volumes"] = clean_volumes(cleaned["volumes"])  # stored as mappings
                check_volume_roots(cleaned["volumes"], roots)
            except InvalidSpec as exc:
                self.add_error("volumes", exc.message)
        if "secret_env" in cleaned and "env" in cleaned and not self.errors:
            try:
                clean_template_fields(env=cleaned["env"], secret_env=cleaned["secret_env"])
            except InvalidSpec as exc:
                self.add_error("secret_env", exc.message)
        if not self.errors:
            try:
                current = self.instance if self.instance.pk else None
                template_kubernetes_check(dict(cleaned), current)
                template_policy_check(dict(cleaned), current)
            except InvalidSpec as exc:
                field = exc.details.get("field")
                self.add_error(field if field in self.fields else None, exc.message)
        return cleaned


@admin.register(ContainerTemplate)
class ContainerTemplateAdmin(RedactedFieldsMixin, admin.ModelAdmin):
    form = ContainerTemplateForm
    redacted_fields = {"env": "env_shown", "volumes": "volumes_shown"}
    list_display = (
        "name",
        "image",
        "image_display",
        "image_checked_at",
        "pull_policy",
        "enabled",
    )
    list_filter = ("enabled", "image_status", "pull_policy", "allowed_groups")
    filter_horizontal = ("allowed_groups",)
    search_fields = ("name", "image")
    readonly_fields = ("image_status", "image_checked_at", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "image", "pull_policy", "command")}),
        (
            "Environment and mounts",
            {
                "fields": ("env", "user_env", "secret_env", "volumes"),
                "description": "Values may use $OWNER_ID, ${INSTANCE_ID}... A volume whose "
                "source is $WORKSPACE_PATH mounts the owner's workspace (exactly that, never "
                "a path below it; gobrave makes it). Other sources are host paths under "
                "allowed_volume_roots, local engines only; one that could never lie inside "
                "them is refused here, when saved.",
            },
        ),
        ("Placement", {"fields": ("resources", "constraints")}),
        (
            "Lifecycle policies",
            {
                "fields": POLICY_FIELDS,
                "description": "Each overrides config.yml's container.policies for this "
                "template: empty takes the installation's value, 0 turns the rule off "
                '(docs/operations.md, "Policies"). Instances keep the policy of the '
                "template as it was at their create.",
            },
        ),
        (
            "Security",
            {
                "fields": ("security",),
                "description": "Overrides of config.yml's container.security for this "
                "template (see docs/security.md).",
            },
        ),
        (
            "Who may use it",
            {
                "fields": ("enabled", "allowed_groups"),
                "description": "Users see and use only enabled templates open to them; "
                "no group chosen: every user.",
            },
        ),
        ("Image", {"fields": ("image_status", "image_checked_at", "created_at", "updated_at")}),
    )

    def redacts(self, request, obj) -> bool:
        # Who may change the template edits it as written; who may only look sees it as
        # the API shows it to them.
        return not self.has_change_permission(request, obj) and super().redacts(request, obj)

    @admin.display(description="env")
    def env_shown(self, obj: ContainerTemplate):
        user = self.page_user()
        return _json_block(redaction.env_for(user, obj.env or {}, obj.secret_env or ()))

    @admin.display(description="volumes")
    def volumes_shown(self, obj: ContainerTemplate):
        data = redaction.template_for(self.page_user(), {"volumes": obj.volumes})
        return _json_block(data["volumes"])

    @admin.display(description="image status", ordering="image_status")
    def image_display(self, obj: ContainerTemplate):
        return badge(obj.image_status, IMAGE_COLOURS.get(obj.image_status, GREY))

    actions = ("refresh_image_status",)

    @admin.action(description="Check the selected templates' images now", permissions=["change"])
    def refresh_image_status(self, request, queryset):
        """Asks the engines now (``template_images_refresh``) and says what each found."""
        found: dict[str, list[str]] = {}
        for template in template_images_refresh(templates=list(queryset.order_by("name"))):
            found.setdefault(template.image_status, []).append(template.name)
        parts = [f"{status}: {', '.join(names)}" for status, names in sorted(found.items())]
        level = messages.WARNING if "missing" in found else messages.SUCCESS
        self.message_user(request, f"Image status — {'; '.join(parts)}.", level)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.user_env_removed:
            self.message_user(
                request, env_policy.removed_rules_note(obj.user_env_removed), messages.WARNING
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change) -> None:
        """Saves, then checks the image at once when nothing would pull a missing one.

        Saving clears the note of rules an upgrade removed: the page that was saved showed it.
        """
        obj.user_env_removed = []
        super().save_model(request, obj, form, change)
        if obj.pull_policy != "never":
            return
        template_images_refresh(templates=[obj])
        if obj.image_status == "missing":
            self.message_user(
                request,
                f"The image {obj.image} is missing on a runtime this template may use and its "
                "pull policy is never: creates will fail until the image is there.",
                messages.WARNING,
            )


# --- runtimes --------------------------------------------------------------------------------


class RuntimeForm(forms.ModelForm):
    """Offers the ``fake`` driver only where the settings allow it (tests). The address
    and the TLS files are checked by ``Runtime.clean`` (``containers.addresses``): the
    paths are shown, the files' content never."""

    class Meta:
        model = Runtime
        fields = list(runtimes.WRITABLE)  # what the staff API may set too
        help_texts = {
            "base_url": "unix:///var/run/docker.sock, tcp://host:2376 with the three TLS "
            "files below, or ssh://user@host[:port] (as the user gobrave runs as).",
        }

    def _post_clean(self) -> None:
        """As the services check (``runtimes.runtime_fit_problem``): a Kubernetes runtime
        that templates refused there could be placed on is refused on its labels."""
        super()._post_clean()
        placement = set(runtimes.PLACEMENT_FIELDS) & set(self.changed_data)
        if not self.errors and (self.instance.pk is None or placement):
            problem = runtimes.runtime_fit_problem(self.instance)
            if problem:
                self.add_error("labels", problem)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "driver" in self.fields and not fake_driver_allowed():
            self.fields["driver"].choices = [
                choice for choice in self.fields["driver"].choices if choice[0] != "fake"
            ]


@admin.register(Runtime)
class RuntimeAdmin(RuntimeFleetMixin, admin.ModelAdmin):
    """Engines: their health (cached) and since when, load, labels and placement state;
    cordon, uncordon and decommission are actions (``RuntimeFleetMixin``)."""

    form = RuntimeForm
    list_display = (
        "name",
        "driver",
        "base_url",
        "enabled",
        "placement",
        "answers",
        "load",
        "label_list",
        "workspace_driver",
        "node_name",
        "last_seen_at",
    )
    list_filter = ("driver", "enabled", "cordoned", "health")
    search_fields = ("name", "base_url", "node_name")
    actions = ("cordon_runtimes", "uncordon_runtimes", "decommission_runtimes")
    readonly_fields = (
        "answers",
        "placement",
        "history",
        "health_checked_at",
        "health_since",
        "node_name",
        "last_seen_at",
        "last_error",
        "serves_stats",
        "cordoned_at",
        "cordoned_by",
        "decommissioned_at",
        "created_at",
    )

    def save_model(self, request, obj, form, change) -> None:
        """Through the services (``containers.fleet.runtimes``), as the API: a change of
        ``enabled`` or of the capacity is an entry in the runtime's history, with the
        user as its actor. The form has checked the row as the service does."""
        given = {f: form.cleaned_data[f] for f in runtimes.WRITABLE if f in form.cleaned_data}
        if change:
            changed = {f: v for f, v in given.items() if f in form.changed_data}
            saved = runtimes.runtime_update(runtime_id=obj.pk, actor=actor_of(request), **changed)
        else:
            saved = runtimes.runtime_create(actor=actor_of(request), **given)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj) -> None:
        """Through the service: the deletion is an entry in the engine's history."""
        runtimes.runtime_delete(runtime_id=obj.pk, actor=actor_of(request))

    def delete_queryset(self, request, queryset) -> None:
        for runtime_id in queryset.values_list("pk", flat=True):
            runtimes.runtime_delete(runtime_id=runtime_id, actor=actor_of(request))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The runtime's own page checks its engine now (bounded), then shows the record."""
        runtime = self.get_object(request, object_id)
        if runtime is not None and request.method == "GET":
            runtime_health_check(runtime=runtime, actor=actor_of(request))
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="engine answers", ordering="health")
    def answers(self, obj: Runtime):
        return engine_health_badge(obj)


def engine_health_badge(runtime: Runtime | None):
    """The cached health record (``containers.execution.health``) as a badge: never an engine call.

    An engine that does not answer says since when on the badge itself.
    """
    if runtime is None or runtime.pk is None or runtime.health == Runtime.Health.UNKNOWN:
        return badge("not checked yet", GREY)
    since = f" since {runtime.health_since:%Y-%m-%d %H:%M:%S}" if runtime.health_since else ""
    checked = f"checked {runtime.health_checked_at:%H:%M:%S}" if runtime.health_checked_at else ""
    if runtime.health == Runtime.Health.REACHABLE:
        return badge("answers", "#198754", title=f"{checked}{since}")
    return badge(f"no answer{since}", "#dc3545", title=f"{runtime.last_error} ({checked})")


# --- history, orphans ------------------------------------------------------------------------


class _Echo:
    def write(self, value: str) -> str:
        return value


CSV_COLUMNS = (
    "created_at",
    "instance_id",
    "instance_name",
    "kind",
    "from_status",
    "to_status",
    "actor",
    "message",
)


# The kinds gobrave writes, each in words (``?kind=`` takes any kind).
EventKindFilter = choices_filter(
    "kind",
    lambda: sorted(((k, event_kind_display(k)) for k in EVENT_KIND_WORDS), key=lambda c: c[1]),
    title="kind",
)


@admin.register(ContainerEvent)
class ContainerEventAdmin(FlatChangelistMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The audit log: every request, transition and runtime event, never edited."""

    list_display = (
        "created_at",
        "instance_name",
        "owner",
        "kind_display",
        "from_display",
        "to_display",
        "actor",
        "message",
    )
    list_select_related = ("owner",)
    # No date hierarchy: its year and month links are a DISTINCT over the whole history.
    # The owner is typed in (a username or an id), never a list of every user; it keeps
    # the history of deleted instances too (``ContainerEvent.owner``).
    list_filter = (
        EventKindFilter,
        related_filter("owner", name_field="username", title="owner"),
        value_filter("actor", title="actor"),
        "created_at",
    )
    search_fields = ("instance_name", "=instance_id", "message")
    actions = ("export_csv",)

    @admin.display(description="kind", ordering="kind")
    def kind_display(self, obj: ContainerEvent):
        return format_html('<span title="{}">{}</span>', obj.kind, event_kind_display(obj.kind))

    @admin.display(description="from", ordering="from_status")
    def from_display(self, obj: ContainerEvent):
        return status_badge(obj.from_status) if obj.from_status else "-"

    @admin.display(description="to", ordering="to_status")
    def to_display(self, obj: ContainerEvent):
        return status_badge(obj.to_status) if obj.to_status else "-"

    @admin.action(description="Export selected events as CSV", permissions=["view"])
    def export_csv(self, request, queryset):
        writer = csv.writer(_Echo())
        rows = queryset.order_by("created_at", "id").values_list(*CSV_COLUMNS)

        def lines():
            yield writer.writerow(CSV_COLUMNS)
            for row in rows.iterator(chunk_size=2000):
                yield writer.writerow(
                    [v.isoformat() if hasattr(v, "isoformat") else v for v in row]
                )

        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="container-events-{stamp}.csv"'
        return response


@admin.register(OrphanContainer)
class OrphanContainerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Containers with our labels and no instance, as the reconciler reports them."""

    list_display = (
        "name",
        "container_id",
        "runtime",
        "status",
        "first_seen_at",
        "last_seen_at",
        "removed_at",
    )
    list_filter = ("runtime", ("removed_at", admin.EmptyFieldListFilter))
    list_select_related = ("runtime",)
    search_fields = ("name", "container_id")
    actions = ["remove_orphans"]

    def has_remove_permission(self, request) -> bool:
        return request.user.has_perm("containers.delete_orphancontainer")

    @admin.action(
        description="Remove the selected orphan containers from their engines",
        permissions=["remove"],
    )
    def remove_orphans(self, request, queryset):
        # Each removal calls an engine, bounded in time, outside any transaction.
        removed = 0
        for orphan in queryset.filter(removed_at__isnull=True).select_related("runtime"):
            try:
                orphan_remove(orphan=orphan, actor=user_actor(request.user))
            except DomainError as exc:
                self.message_user(
                    request, f"{orphan.name}: not removed: {exc.message}", messages.ERROR
                )
                continue
            removed += 1
        if removed:
            self.message_user(request, f"Removed {removed} orphan container(s).", messages.SUCCESS)
