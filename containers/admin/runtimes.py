"""The runtime changelist's fleet side: what each engine carries, and the cordon,
uncordon and decommission actions (each calls ``containers.fleet.services``).

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
from containers.fleet.selectors import runtime_decommission_preview
from containers.fleet.services import (
    REASON_MAX,
    runtime_cordon,
    runtime_decommission,
    runtime_uncordon,
)
from containers.models import Runtime
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
