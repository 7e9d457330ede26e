"""The retention purges of ``sent`` rows and of resolved dead letters."""

from __future__ import annotations

import datetime as dt

from django.db.models.functions import Now

from core.batches import delete_in_batches
from core.retention import retention_age
from outbox import conf
from outbox.models import OutboxEvent, OutboxStatus


def purge_sent(older_than: dt.timedelta | None = None, *, chunk: int = 5000) -> int:
    """Delete ``sent`` rows older than ``retention``; returns how many went.

    In chunks of ``chunk`` rows, each its own short transaction (``core.batches``): a
    first purge of millions of rows never holds one long transaction (which would stall
    vacuum and slow every claim meanwhile). Registered with ``core.retention``.
    """
    age = older_than or dt.timedelta(seconds=conf.value("retention"))
    old = OutboxEvent.objects.filter(status=OutboxStatus.SENT, sent_at__lt=Now() - age)
    return delete_in_batches(old, batch=chunk)


def purge_resolved_dead(older_than: dt.timedelta | None = None, *, chunk: int = 1000) -> int:
    """Delete dead letters an operator resolved (``resolved_at``) more than
    ``retention.dead_letters_resolved`` ago, in chunks; unresolved ones always stay.
    Reads only dead rows (the ``outbox_dead`` partial index)."""
    age = older_than or retention_age("dead_letters_resolved")
    if age is None:
        return 0
    old = OutboxEvent.objects.filter(status=OutboxStatus.DEAD, resolved_at__lt=Now() - age)
    return delete_in_batches(old, batch=chunk)
