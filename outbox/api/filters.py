"""The filters and orderings of ``GET /api/outbox/`` (``core.api.filters``)."""

from __future__ import annotations

import django_filters

from core.api.filters import ListFilterSet, ordering, statuses
from outbox.models import OutboxEvent, OutboxStatus


class OutboxFilter(ListFilterSet):
    status = statuses(OutboxStatus.choices)
    kind = django_filters.CharFilter(max_length=64, help_text="The request kind.")
    queue = django_filters.CharFilter(max_length=32, help_text="The worker queue.")
    aggregate_id = django_filters.CharFilter(
        max_length=64, help_text="The entity the request is for (an instance's id)."
    )
    ordering = ordering("id", "available_at", "created_at", default="-id")

    class Meta:
        model = OutboxEvent
        fields: list[str] = []
