"""What the webhooks app keeps: finished deliveries, purged past
``retention.webhook_deliveries`` (registered with ``core.retention`` in ``apps.py``)."""

from __future__ import annotations

from django.db.models.functions import Now

from core.batches import delete_in_batches
from core.retention import retention_age
from outbox.models import OutboxEvent, OutboxStatus
from webhooks.kinds import DELIVERY_KIND


def deliveries_purge(batch: int) -> int:
    """Delete the finished deliveries (sent, superseded or dead) made longer ago than
    ``retention.webhook_deliveries``, ``batch`` rows per statement; returns how many went.
    Waiting ones always stay. Sent ones also go with the outbox's own ``retention`` when
    that is sooner; dead ones stay in the dead letters until this age."""
    age = retention_age("webhook_deliveries")
    if age is None:
        return 0
    old = OutboxEvent.objects.filter(
        kind=DELIVERY_KIND,
        status__in=[OutboxStatus.SENT, OutboxStatus.DEAD],
        created_at__lt=Now() - age,
    )
    return delete_in_batches(old, batch=batch)
