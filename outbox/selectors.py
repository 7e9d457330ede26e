"""Reads over the outbox: the API's listing, the counts, what the cluster supervisor watches.

Every time is compared on the database's clock, as the relay sets them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import connection
from django.db.models import DurationField, ExpressionWrapper, Max, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from outbox import conf
from outbox.models import DispatcherBeat, OutboxEvent, OutboxStatus


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


# Each has a partial index (see OutboxEvent.Meta): counting them never reads sent rows.
INDEXED_STATUSES = (OutboxStatus.PENDING, OutboxStatus.PROCESSING, OutboxStatus.DEAD)


def outbox_counts(statuses: Iterable[str] = INDEXED_STATUSES) -> dict[str, int]:
    """``{status: rows}``, one query per status so each is served by its partial index
    (``status IN (...)`` would not match a partial index's predicate and scans the table).
    Costs the same at a million sent rows as at a thousand. ``sent`` is refused: it is
    the table's bulk (count it by the relay counters)."""
    counts = {}
    for status in statuses:
        if status not in INDEXED_STATUSES:
            raise ValueError(f"counting {status!r} outbox rows would scan the table")
        counts[status] = OutboxEvent.objects.filter(status=status).count()
    return counts


def outbox_list() -> QuerySet[OutboxEvent]:
    """Every row, newest first (the API's list filters them: ``outbox.api.filters``)."""
    return OutboxEvent.objects.order_by("-id")


def queue_began_since(*, queue: str, since: dt.datetime | None) -> bool:
    """True when a row of ``queue`` was begun by a worker after ``since`` (database clock)."""
    if since is None:
        return False
    return OutboxEvent.objects.filter(queue=queue, started_at__gte=since).exists()


def database_now() -> dt.datetime:
    """The database's clock now (what leases and ``started_at`` are set on).

    SQLite runs on this host, whose clock it uses anyway.
    """
    if conf.is_postgres(connection):
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]
    return timezone.now()


def mark_age(*, prefix: str) -> dt.timedelta | None:
    """How long ago the freshest liveness mark whose name begins with ``prefix``
    (``outbox.liveness.mark_prefix``) was renewed, on the database's clock (the clock
    the marks are written on); None when there is no such mark. One short statement
    over a table of a few rows."""
    marks = DispatcherBeat.objects.filter(name__startswith=prefix)
    age = marks.aggregate(
        age=ExpressionWrapper(Now() - Max("beat_at"), output_field=DurationField())
    )["age"]
    return None if age is None else max(dt.timedelta(0), age)
