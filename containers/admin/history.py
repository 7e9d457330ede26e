"""The instances' history (read-only, exported as CSV) and the orphan containers
(listed by the reconciler, removed by an action)."""

from __future__ import annotations

import csv

from django.contrib import admin
from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.html import format_html

from containers.actors import user_actor
from containers.admin.common import remove_each
from containers.admin.display import (
    status_badge,
)
from containers.execution.housekeeping import orphan_remove
from containers.models import (
    ContainerEvent,
    OrphanContainer,
)
from containers.queues import EVENT_KIND_WORDS, event_kind_display
from core.admin_helpers import ReadOnlyAdminMixin
from core.admin_lists import FlatChangelistMixin, choices_filter, related_filter, value_filter


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
        actor = user_actor(request.user)
        remove_each(
            self,
            request,
            queryset.filter(removed_at__isnull=True).select_related("runtime"),
            remove=lambda orphan: orphan_remove(orphan=orphan, actor=actor),
            name=lambda orphan: orphan.name,
            plural="orphan container(s)",
        )
