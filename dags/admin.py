"""Admin pages for DAG templates and runs; every change goes through ``dags.services``.

A run's page draws its graph (server-rendered SVG, no script from anywhere else) with
each node's state, refreshes the drawing every two seconds while the run is active, and
offers cancel and retry-failed. Changelists use ``list_select_related``.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from containers.actors import user_actor
from containers.admin.common import RedactedFieldsMixin
from containers.spec import redaction
from core.admin_helpers import ReadOnlyAdminMixin, badge
from core.admin_lists import FlatChangelistMixin, choices_filter, related_filter
from core.errors import DomainError
from dags import selectors
from dags.errors import DagInvalid
from dags.graph_layout import COLOURS, layout
from dags.history import DAG_EVENT_KIND_WORDS, dag_event_kind_display
from dags.models import DagEvent, DagRun, DagTemplate
from dags.services import (
    dag_nodes_clean,
    dag_run_cancel,
    dag_run_retry_failed,
    dag_run_start,
    dag_template_delete,
    dag_template_save,
)
from dags.states import RUN_ACTIVE, RUN_CANCELLABLE, RUN_RETRYABLE, RunStatus

RUN_COLOURS = {
    RunStatus.PENDING: "#6c757d",
    RunStatus.RUNNING: "#0d6efd",
    RunStatus.CANCELLING: "#fd7e14",
    RunStatus.SUCCEEDED: "#198754",
    RunStatus.FAILED: "#dc3545",
    RunStatus.CANCELLED: "#fd7e14",
}


def _actor(request) -> str:
    return user_actor(request.user)


class DagTemplateForm(forms.ModelForm):
    nodes = forms.JSONField(
        # A new template starts from an empty list, not the ``null`` an unset JSONField shows.
        initial=list,
        help_text='A JSON list of nodes: {"key", "template" (name or id), "command" (a list '
        'of words), "env", "depends_on", "retries"}. For example: [{"key": "build", '
        '"template": "builder"}, {"key": "test", "template": "tester", "command": ["sh", '
        '"-c", "make test"], "depends_on": ["build"], "retries": 1}]',
        widget=forms.Textarea(attrs={"rows": 16, "cols": 90, "style": "font-family:monospace"}),
    )

    class Meta:
        model = DagTemplate
        fields = ["name", "description", "nodes"]

    def clean_nodes(self):
        try:
            return dag_nodes_clean(self.cleaned_data["nodes"])
        except DagInvalid as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(DagTemplate)
class DagTemplateAdmin(RedactedFieldsMixin, admin.ModelAdmin):
    form = DagTemplateForm
    fields = ("name", "description", "nodes")
    redacted_fields = {"nodes": "nodes_shown"}
    list_display = ("name", "node_count", "updated_at")
    search_fields = ("name",)
    actions = ["start_runs"]

    @admin.display(description="nodes")
    def node_count(self, obj: DagTemplate) -> int:
        return len(obj.nodes)

    def redacts(self, request, obj) -> bool:
        # Who may change the DAG edits it as written; who may only look sees it as the API
        # shows it to them.
        return not self.has_change_permission(request, obj) and super().redacts(request, obj)

    @admin.display(description="nodes")
    def nodes_shown(self, obj: DagTemplate):
        secret_env = selectors.dag_secret_env([obj])
        nodes = redaction.dag_nodes_for(self.page_user(), obj.nodes, secret_env)
        return format_html(
            '<pre style="white-space:pre-wrap">{}</pre>', json.dumps(nodes, indent=2)
        )

    def save_model(self, request, obj, form, change) -> None:
        saved = dag_template_save(
            name=form.cleaned_data["name"],
            description=form.cleaned_data.get("description", ""),
            nodes=form.cleaned_data["nodes"],
            dag=obj if change else None,
        )
        obj.pk = saved.pk

    def delete_model(self, request, obj) -> None:
        dag_template_delete(dag=obj)

    @admin.action(description="Start a run of the selected DAG templates (as me)")
    def start_runs(self, request, queryset):
        for dag in queryset:
            try:
                run = dag_run_start(dag=dag, owner=request.user, actor=_actor(request))
            except DomainError as exc:
                self.message_user(request, f"{dag.name}: refused: {exc.message}", messages.ERROR)
                continue
            url = reverse("admin:dags_dagrun_change", args=[run.pk])
            self.message_user(
                request, format_html('Started <a href="{}">{}</a>', url, run), messages.SUCCESS
            )


@admin.register(DagRun)
class DagRunAdmin(FlatChangelistMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("short_id", "template_name", "owner", "status_display", "nodes", "created_at")
    list_filter = ("status", related_filter("owner", name_field="username", title="owner"))
    list_select_related = ("owner",)
    search_fields = ("template_name", "owner__username")
    actions = ["cancel_runs", "retry_failed_runs"]
    change_form_template = "admin/dags/dagrun/change_form.html"
    fields = (
        "id",
        "template_name",
        "owner",
        "status",
        "reason",
        "runtime",
        "created_by",
        "created_at",
        "started_at",
        "finished_at",
        "workspace_removed_at",
    )

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("nodes")

    def has_change_permission(self, request, obj=None) -> bool:
        # The change page only shows; the actions need the change permission.
        return request.user.has_perm("dags.change_dagrun") if obj is None else False

    @admin.display(description="run")
    def short_id(self, obj: DagRun) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="status", ordering="status")
    def status_display(self, obj: DagRun):
        return badge(obj.status, RUN_COLOURS.get(obj.status, "#6c757d"), title=obj.reason)

    @admin.display(description="nodes")
    def nodes(self, obj: DagRun):
        counts: dict[str, int] = {}
        for node in obj.nodes.all():
            counts[node.status] = counts.get(node.status, 0) + 1
        return format_html_join(
            " ",
            '<span style="color:{}">{}&nbsp;{}</span>',
            ((COLOURS.get(s, "#333"), s, n) for s, n in sorted(counts.items())),
        )

    def _each(self, request, queryset, service, verb: str) -> None:
        done, refused = 0, []
        for run in queryset:
            if run.owner_id != request.user.pk and not request.user.has_perm("dags.change_dagrun"):
                refused.append(f"{run}: not yours")
                continue
            try:
                service(run_id=run.pk, actor=_actor(request))
                done += 1
            except DomainError as exc:
                refused.append(f"{run}: {exc.message}")
        if done:
            self.message_user(request, f"{verb}: {done} run(s).", messages.SUCCESS)
        for line in refused:
            self.message_user(request, f"{verb} refused: {line}", messages.WARNING)

    @admin.action(description="Cancel the selected runs", permissions=["change"])
    def cancel_runs(self, request, queryset):
        self._each(request, queryset, dag_run_cancel, "Cancel")
        return self._back(request)

    @admin.action(description="Retry the failed nodes of the selected runs", permissions=["change"])
    def retry_failed_runs(self, request, queryset):
        self._each(request, queryset, dag_run_retry_failed, "Retry failed")
        return self._back(request)

    def _back(self, request):
        target = request.POST.get("_next")
        if target and target.startswith("/admin/"):
            return HttpResponseRedirect(target)
        return None

    def get_urls(self):
        graph = self.admin_site.admin_view(self.graph_view)
        return [
            path("<uuid:object_id>/graph/", graph, name="dags_dagrun_graph"),
            *super().get_urls(),
        ]

    def _graph_context(self, run: DagRun) -> dict:
        nodes = selectors.run_nodes(run)
        states = {
            n.key: {"status": n.status, "attempt": n.attempt, "reason": n.reason} for n in nodes
        }
        return {
            "run": run,
            "layout": layout(run.graph, states),
            "node_rows": nodes,
            "active": run.status in RUN_ACTIVE,
        }

    def graph_view(self, request, object_id):
        """The graph, the nodes table and the status: the fragment the page refreshes."""
        if not self.has_view_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        run = get_object_or_404(DagRun, pk=object_id)
        return TemplateResponse(request, "admin/dags/dagrun/graph.html", self._graph_context(run))

    @staticmethod
    def _output_shown(request, run: DagRun, node) -> str:
        """A node's kept output, its secret values hidden unless the viewer may see them."""
        spec = selectors.node_output_spec(run, node.key)
        return redaction.logs_for(request.user, spec, node.output)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, object_id)
        extra_context = extra_context or {}
        if run is not None:
            extra_context.update(self._graph_context(run))
            extra_context["events"] = [
                (event, dag_event_kind_display(event.kind))
                for event in DagEvent.objects.filter(run_id=run.pk).order_by("-created_at", "-id")[
                    :100
                ]
            ]
            extra_context["graph_url"] = reverse("admin:dags_dagrun_graph", args=[run.pk])
            can_act = request.user.has_perm("dags.change_dagrun") or (
                run.owner_id == request.user.pk
            )
            extra_context["graph_json"] = json.dumps(run.graph)
            extra_context["outputs"] = [
                (node.key, node.output_attempt, self._output_shown(request, run, node))
                for node in extra_context["node_rows"]
                if node.output_attempt is not None
            ]
            # Offer only what the run's state allows: cancel on a finished run is refused.
            extra_context["can_cancel"] = can_act and run.status in RUN_CANCELLABLE
            extra_context["can_retry"] = can_act and run.status in RUN_RETRYABLE
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(DagEvent)
class DagEventAdmin(FlatChangelistMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "created_at",
        "run_id",
        "node",
        "kind_display",
        "from_status",
        "to_status",
        "actor",
        "owner",
    )
    list_select_related = ("owner",)
    list_filter = (
        choices_filter(
            "kind",
            lambda: sorted((k, dag_event_kind_display(k)) for k in DAG_EVENT_KIND_WORDS),
            title="kind",
        ),
        related_filter("owner", name_field="username", title="owner"),
        "created_at",
    )
    search_fields = ("run_id", "node", "message")

    @admin.display(description="kind", ordering="kind")
    def kind_display(self, obj: DagEvent):
        return format_html('<span title="{}">{}</span>', obj.kind, dag_event_kind_display(obj.kind))
