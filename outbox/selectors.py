"""Reads over the outbox that processes watching it (the cluster supervisor) need.

Every time is compared on the database's clock, as the relay sets them.
"""

from __future__ import annotations

import datetime as dt

from django.db.models.functions import Now

from outbox import conf
from outbox.models import OutboxEvent, OutboxStatus


def handoff_stalled(*, queue: str, seconds: float) -> int:
    """How many of ``queue``'s claims no worker took within ``seconds``, if its workers
    took none at all meanwhile; 0 while the queue is healthy, idle or busy.

    A claimed row waits for a worker at most while others run (the in-flight limit is
    the worker count plus ``prefetch``), so a claim older than ``seconds`` that was never
    begun, with no row begun in those ``seconds`` and none running now, means the
    cluster takes no tasks: wedged, or gone.
    """
    window = dt.timedelta(seconds=seconds)
    rows = OutboxEvent.objects.filter(queue=queue, status=OutboxStatus.PROCESSING)
    # claimed_at = lease_expires_at - claim_lease: the claim's lease starts at the claim.
    waiting = rows.filter(
        started_at__isnull=True, lease_expires_at__lt=Now() + conf.claim_lease(queue) - window
    ).count()
    if not waiting:
        return 0
    running = rows.filter(started_at__isnull=False, lease_expires_at__gt=Now()).exists()
    begun = OutboxEvent.objects.filter(queue=queue, started_at__gt=Now() - window).exists()
    return 0 if running or begun else waiting
