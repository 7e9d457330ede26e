"""The outbox in the admin: watch requests move, make a backed-off row due now.

Rows are read-only here (the relay owns them); dead rows stay for diagnosis with their
reason. The outbox never imports the apps that own the aggregates: an app registers a
function that turns a row into a link to its aggregate's history
(``register_history_link``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin, messages
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from core.admin_helpers import GREY, ActionsOnlyAdminMixin, badge, first_line
from core.admin_lists import FlatChangelistMixin, choices_filter
from core.errors import DomainError
from outbox import registry
from outbox.models import OutboxEvent, OutboxStatus
from outbox.outcomes import Outcome
from outbox.services import outbox_dead_requeue, outbox_dead_resolve, outbox_retry_now

STATUS_COLOURS = {
    OutboxStatus.PENDING: "#6c757d",
    OutboxStatus.PROCESSING: "#0d6efd",
    OutboxStatus.SENT: "#198754",
    OutboxStatus.DEAD: "#dc3545",
}

_history_links: list[Callable[[OutboxEvent], str | None]] = []


def register_history_link(func: Callable[[OutboxEvent], str | None]):
    """Register ``func(event) -> url | None``: where the history of a row's aggregate lives."""
    _history_links.append(func)
    return func


def history_link_for(event: OutboxEvent) -> str | None:
    for func in _history_links:
        url = func(event)
        if url:
            return url
    return None


@admin.register(OutboxEvent)
class OutboxEventAdmin(FlatChangelistMixin, ActionsOnlyAdminMixin, admin.ModelAdmin):
    """Outbox rows: filter by status and kind; "retry now" for rows waiting on backoff."""

    list_display = (
        "id",
        "kind",
        "status_display",
        "aggregate",
        "attempts",
        "reclaims",
        "age",
        "due",
        "outcome",
        "error_display",
    )
    # Kinds, queues and outcomes as the code registers them, not a DISTINCT over the rows.
    list_filter = (
        "status",
        choices_filter("kind", lambda: [(k, k) for k in registry.kinds()], title="kind"),
        choices_filter("queue", lambda: [(q, q) for q in sorted(registry.queues())], title="queue"),
        choices_filter("outcome", lambda: [(o.value, o.value) for o in Outcome], title="outcome"),
    )
    search_fields = ("=aggregate_id", "kind")
    actions = ("retry_now", "dismiss", "requeue")
    fieldsets = (
        (None, {"fields": ("id", "kind", "queue", "status_display", "outcome", "aggregate")}),
        (
            "Delivery",
            {"fields": ("attempts", "reclaims", "available_at", "lease_expires_at", "started_at")},
        ),
        ("Reason", {"fields": ("last_error_display",)}),
        ("Payload", {"fields": ("payload", "created_at", "sent_at")}),
        ("Resolved", {"fields": ("resolved_at", "resolved_by")}),
    )

    # -- read-only: the relay owns these rows ------------------------------------------------

    def has_add_permission(self, request) -> bool:
        return False

    # -- display ------------------------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_display(self, obj: OutboxEvent):
        return badge(obj.status, STATUS_COLOURS.get(obj.status, GREY))

    @admin.display(description="aggregate", ordering="aggregate_id")
    def aggregate(self, obj: OutboxEvent):
        url = history_link_for(obj)
        if url:
            return format_html('<a href="{}" title="its history">{}</a>', url, obj.aggregate_id)
        return obj.aggregate_id

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: OutboxEvent):
        return timesince(obj.created_at) if obj.created_at else "-"

    @admin.display(description="due", ordering="available_at")
    def due(self, obj: OutboxEvent):
        if obj.status != OutboxStatus.PENDING:
            return "-"
        if obj.available_at <= timezone.now():
            return "now"
        return f"in {timesince(timezone.now(), obj.available_at)}"

    @admin.display(description="last error")
    def error_display(self, obj: OutboxEvent):
        return first_line(obj.last_error) if obj.last_error else ""

    @admin.display(description="last error (the reason for dead rows)")
    def last_error_display(self, obj: OutboxEvent):
        if not obj.last_error:
            return "-"
        return format_html(
            '<pre style="white-space:pre-wrap;max-height:30em;overflow:auto">{}</pre>',
            obj.last_error,
        )

    # -- actions ------------------------------------------------------------------------------

    @admin.action(description="Retry now (rows waiting on backoff)", permissions=["change"])
    def retry_now(self, request, queryset):
        now = timezone.now()
        for event in queryset.only("id", "status", "available_at").order_by("id"):
            label = f"#{event.id}"
            if event.status != OutboxStatus.PENDING:
                self.message_user(
                    request,
                    f"{label}: refused: it is {event.status}; only pending rows wait on backoff",
                    messages.WARNING,
                )
                continue
            if event.available_at <= now:
                self.message_user(request, f"{label}: already due", messages.INFO)
                continue
            try:
                outbox_retry_now(event_id=event.id)
            except DomainError as exc:  # changed or gone meanwhile
                self.message_user(request, f"{label}: refused: {exc.message}", messages.WARNING)
                continue
            self.message_user(request, f"{label}: due now", messages.SUCCESS)

    @admin.action(description="Dismiss (dead letters dealt with)", permissions=["change"])
    def dismiss(self, request, queryset):
        for event in queryset.only("id", "status", "resolved_at").order_by("id"):
            label = f"#{event.id}"
            if event.status != OutboxStatus.DEAD:
                self.message_user(
                    request, f"{label}: refused: it is {event.status}, not dead", messages.WARNING
                )
                continue
            if event.resolved_at is not None:
                self.message_user(request, f"{label}: already dismissed", messages.INFO)
                continue
            try:
                outbox_dead_resolve(event_id=event.id, actor=request.user.get_username())
            except DomainError as exc:  # gone meanwhile
                self.message_user(request, f"{label}: refused: {exc.message}", messages.WARNING)
                continue
            self.message_user(request, f"{label}: dismissed", messages.SUCCESS)

    @admin.action(
        description="Requeue (run dead letters again as new rows)", permissions=["change"]
    )
    def requeue(self, request, queryset):
        for event in queryset.only("id", "status").order_by("id"):
            label = f"#{event.id}"
            if event.status != OutboxStatus.DEAD:
                self.message_user(
                    request, f"{label}: refused: it is {event.status}, not dead", messages.WARNING
                )
                continue
            try:
                again = outbox_dead_requeue(event_id=event.id, actor=request.user.get_username())
            except DomainError as exc:  # gone meanwhile, or its kind is no longer run
                self.message_user(request, f"{label}: refused: {exc.message}", messages.WARNING)
                continue
            self.message_user(request, f"{label}: requeued as #{again.id}", messages.SUCCESS)
