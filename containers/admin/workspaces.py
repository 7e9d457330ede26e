"""Owners' workspaces on the engines: which engine, whose, how big (as the engine last
said), and a remove action for the workspace of an owner who has no instances left.

The list reads the database only; sizes come from the "measure" action
(``workspace_sizes_refresh``), which asks the engines, bounded in time.
"""

from __future__ import annotations

import datetime as dt

from django.contrib import admin, messages
from django.template.defaultfilters import filesizeformat
from django.utils.html import format_html

from containers.actors import user_actor
from containers.admin.common import remove_each
from containers.admin.display import time_ago
from containers.execution.housekeeping import workspace_remove
from containers.execution.workspaces import workspace_sizes_refresh
from containers.models import Runtime, Workspace
from containers.spec.policies import span, workspace_retention_of
from core.admin_helpers import ReadOnlyAdminMixin


@admin.register(Workspace)
class WorkspaceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Workspaces (and the volumes gobrave owns like them: a DAG run's ``/dag``)."""

    list_display = (
        "source",
        "kind",
        "runtime",
        "owner",
        "size",
        "measured",
        "retention_shown",
        "created_at",
    )
    list_filter = ("runtime", "kind")
    list_select_related = ("runtime", "owner")
    search_fields = ("source", "owner__username")
    ordering = ("owner__username", "runtime__name", "source")
    actions = ("measure_sizes", "remove_workspaces")

    @admin.display(description="size", ordering="size_bytes")
    def size(self, obj: Workspace):
        if obj.size_bytes is not None:
            return filesizeformat(obj.size_bytes)
        if obj.size_checked_at is None:
            return format_html('<span title="{}">-</span>', "not measured")
        return format_html('<span title="{}">?</span>', "the engine does not say")

    @admin.display(description="measured", ordering="size_checked_at")
    def measured(self, obj: Workspace):
        return time_ago(obj.size_checked_at) if obj.size_checked_at else "-"

    @admin.display(description="retention")
    def retention_shown(self, obj: Workspace) -> str:
        """The workspace_retention that applies to it (docs/operations.md, "Policies"),
        and when it goes if its owner has had no instance since ``unused_since``."""
        if obj.kind != Runtime.WorkspaceDriver.VOLUME:
            return "-"
        keep = workspace_retention_of(retention=obj.retention, by_default=obj.retention_default)
        if not keep:
            return "kept"
        if obj.unused_since is None:
            return f"{span(keep)} once unused"
        due = obj.unused_since + dt.timedelta(seconds=keep)
        return f"unused: removed after {due:%Y-%m-%d %H:%M %Z}"

    def has_remove_permission(self, request) -> bool:
        return request.user.has_perm("containers.delete_workspace")

    @admin.action(description="Measure the selected workspaces now", permissions=["view"])
    def measure_sizes(self, request, queryset):
        problems = workspace_sizes_refresh(workspaces=list(queryset.select_related("runtime")))
        for problem in problems:
            self.message_user(request, f"Not measured: {problem}", messages.WARNING)
        if not problems:
            self.message_user(request, "Measured.", messages.SUCCESS)

    @admin.action(
        description="Remove the selected workspaces (owners with no instances left)",
        permissions=["remove"],
    )
    def remove_workspaces(self, request, queryset):
        """Each through ``workspace_remove``: refused, with the reason, for an owner who
        still has instances; an engine call each, bounded, outside any transaction."""
        actor = user_actor(request.user)
        remove_each(
            self,
            request,
            queryset.select_related("runtime", "owner").order_by("source"),
            remove=lambda row: workspace_remove(workspace_id=row.pk, actor=actor),
            name=lambda row: row.source,
            plural="workspace(s)",
        )
