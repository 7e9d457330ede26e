"""The runtimes' pages: the form (through ``containers.fleet.runtimes``), the changelist's
fleet side (what each engine carries; the cordon, uncordon and decommission actions,
each calling ``containers.fleet.services``) and the engine's health badge.

The columns read the row's cached health and the counts the changelist annotates
(``selectors.runtime_list_with_load``): never an engine call, and the same number of
queries however many runtimes a page shows.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from containers import selectors
from containers.actors import user_actor
from containers.admin.common import actor_of
from containers.engines import fake_driver_allowed
from containers.execution.health import runtime_health_check
from containers.fleet import runtimes
from containers.fleet.selectors import runtime_decommission_preview
from containers.fleet.services import (
    REASON_MAX,
    runtime_cordon,
    runtime_decommission,
    runtime_uncordon,
)
from containers.models import (
    Runtime,
)
from core.admin_helpers import GREY, badge


class RuntimeActionForm(ActionForm):
    """The changelist's action bar, with a reason that cordon and uncordon record in each
    engine's history (optional; the decommission asks for its own on its page)."""

    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        label="Reason",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "why (kept in the history)"}),
    )


def _reason(request) -> str:
    return request.POST.get("reason", "").strip()[:REASON_MAX]


class RuntimeFleetMixin:
    """Mixed into ``RuntimeAdmin``: the load and placement columns and the fleet actions,
    which need ``change_runtime``."""

    action_form = RuntimeActionForm

    def get_queryset(self, request):
        return selectors.runtime_list_with_load()

    @admin.display(description="load", ordering="instance_count")
    def load(self, obj: Runtime):
        """Instances placed there (as ``max_containers`` counts them) and create/start
        slots in use there, each against the runtime's capacity (∞: no limit of its own)."""
        return format_html(
            '<span class="gb-load" data-instances="{}" data-slots="{}">containers {}/{}<br>'
            "slots {}/{}</span>",
            obj.instance_count,
            obj.slot_count,
            obj.instance_count,
            "∞" if obj.max_containers is None else obj.max_containers,
            obj.slot_count,
            "∞" if obj.max_concurrency is None else obj.max_concurrency,
        )

    @admin.display(description="placement", ordering="cordoned")
    def placement(self, obj: Runtime):
        state = obj.placement_state
        if state == "decommissioned":
            return badge(state, GREY, title=f"{obj.decommissioned_at:%Y-%m-%d %H:%M}")
        if state == "cordoned":
            when = f" since {obj.cordoned_at:%Y-%m-%d %H:%M:%S}" if obj.cordoned_at else ""
            return badge(state, "#fd7e14", title=f"by {obj.cordoned_by}{when}")
        return badge(state, GREY if state == "disabled" else "#198754")

    @admin.display(description="history")
    def history(self, obj: Runtime):
        """A link to its entries in the engines' history (``RuntimeEvent``, by the
        runtime's id: the entries keep the name it had, which a rename changes and a
        later runtime may take)."""
        if obj is None or obj.pk is None:
            return "–"
        url = reverse("admin:containers_runtimeevent_changelist")
        return format_html(
            '<a href="{}?{}">health changes, cordons, capacity and more</a>',
            url,
            urlencode({"runtime_id": obj.pk}),
        )

    @admin.display(description="labels")
    def label_list(self, obj: Runtime):
        if not obj.labels:
            return "–"
        return format_html_join(" ", "<code>{}={}</code>", sorted(obj.labels.items()))

    @admin.action(description="Cordon: no new placement on the selected", permissions=["change"])
    def cordon_runtimes(self, request, queryset):
        actor, reason = user_actor(request.user), _reason(request)
        names = [runtime_cordon(runtime_id=r.pk, actor=actor, reason=reason).name for r in queryset]
        self.message_user(
            request,
            f"Cordoned {', '.join(names)}: no new placement there; what runs there keeps running.",
            messages.SUCCESS,
        )

    @admin.action(description="Uncordon the selected", permissions=["change"])
    def uncordon_runtimes(self, request, queryset):
        actor, reason = user_actor(request.user), _reason(request)
        done = [runtime_uncordon(runtime_id=r.pk, actor=actor, reason=reason) for r in queryset]
        opened = [r.name for r in done if not r.cordoned]
        kept = [r.name for r in done if r.cordoned]
        if opened:
            self.message_user(request, f"Uncordoned {', '.join(opened)}.", messages.SUCCESS)
        if kept:
            self.message_user(
                request, f"Decommissioned, left cordoned: {', '.join(kept)}.", messages.WARNING
            )

    @admin.action(
        description="Decommission the selected (engine gone for good: forget what it held)",
        permissions=["change"],
    )
    def decommission_runtimes(self, request, queryset):
        """First a page that lists what will be forgotten; the decommission runs on its
        "yes" (the engine is never called)."""
        runtimes = list(queryset.order_by("name"))
        if request.POST.get("confirm") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Decommission runtimes?",
                "opts": self.model._meta,
                "previews": [runtime_decommission_preview(runtime_id=r.pk) for r in runtimes],
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                "reason_max": REASON_MAX,
            }
            return TemplateResponse(
                request, "admin/containers/runtime/decommission_confirmation.html", context
            )
        actor, reason = user_actor(request.user), _reason(request)
        for runtime in runtimes:
            result = runtime_decommission(runtime_id=runtime.pk, actor=actor, reason=reason)
            self.message_user(
                request,
                f"Decommissioned {runtime.name}: {len(result.instances)} instance"
                f"{'' if len(result.instances) == 1 else 's'} forgotten, "
                f"{result.superseded} waiting request{'' if result.superseded == 1 else 's'} "
                f"superseded{'; ' if result.others else ''}{'; '.join(result.others)}. "
                "The runtime may now be deleted.",
                messages.SUCCESS,
            )
        return None


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
        """As the services check: a decommissioned runtime is not switched on again
        (``runtimes.runtime_enable_problem``), and a Kubernetes runtime that templates
        refused there could be placed on is refused on its labels
        (``runtimes.runtime_fit_problem``)."""
        super()._post_clean()
        enabling = "enabled" in self.changed_data and self.instance.enabled
        if enabling and (problem := runtimes.runtime_enable_problem(self.instance)):
            self.add_error("enabled", problem)
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
