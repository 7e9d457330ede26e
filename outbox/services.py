"""Writes to the outbox from the caller's side: enqueue, wake, retry now, counters."""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import os
import threading

from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from outbox import conf, registry
from outbox.errors import NotRetriable, OutboxRowNotFound
from outbox.models import OutboxEvent, OutboxStatus, RelayCounter

log = logging.getLogger(__name__)


def outbox_notify() -> None:
    """Wake the dispatchers (PostgreSQL delivers the NOTIFY when the transaction commits)."""
    if conf.is_postgres(connection):
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {conf.NOTIFY_CHANNEL}")


def outbox_notify_if_due() -> None:
    """Wake the dispatchers only if a pending row is due now (PostgreSQL, at commit).

    A finished row frees an in-flight slot; the wake-up matters only to a row waiting for
    one. When none is due (the common case off a backlog) nobody is woken for nothing; a
    row that becomes due later is found by the dispatcher's poll or its own NOTIFY.
    """
    if conf.is_postgres(connection):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT pg_notify(%s, '') WHERE EXISTS (SELECT 1 FROM "
                f"{OutboxEvent._meta.db_table} WHERE status = 'pending' AND available_at <= now())",
                [conf.NOTIFY_CHANNEL],
            )


def outbox_enqueue(
    *, kind: str, aggregate_id: str, payload: dict, fairness_key: str = ""
) -> OutboxEvent:
    """Write one request row. Must run inside the caller's transaction.

    The caller holds the aggregate's row lock, so rows of one aggregate commit in id
    order (the relay's per-aggregate ordering relies on it). Rows with different
    ``fairness_key`` values are served round-robin by key (``relay.claim``).
    """
    if not connection.in_atomic_block:
        raise RuntimeError("outbox_enqueue() must run inside transaction.atomic()")
    route = registry.route(kind)
    if route is None:
        raise ValueError(f"no outbox handler registered for {kind!r}")
    event = OutboxEvent.objects.create(
        kind=kind,
        queue=route.queue,
        aggregate_id=str(aggregate_id),
        fairness_key=fairness_key[:64],
        payload=payload,
        available_at=Now(),  # the database's clock, as every due time (see relay)
    )
    outbox_notify()
    return event


def outbox_retry_now(*, event_id: int) -> OutboxEvent:
    """Make a pending row that waits on backoff due now, under its row lock.

    Raises ``OutboxRowNotFound`` for no such row and ``NotRetriable`` for a row in any
    other status (the status never changes here: "retry now" moves ``available_at``).
    Idempotent: a row already due stays due.
    """
    with transaction.atomic():
        event = OutboxEvent.objects.select_for_update().filter(id=event_id).first()
        if event is None:
            raise OutboxRowNotFound(f"no outbox row {event_id}", id=event_id)
        if event.status != OutboxStatus.PENDING:
            raise NotRetriable(
                f"outbox row #{event_id} is {event.status}, not pending",
                id=event_id,
                status=event.status,
            )
        event.available_at = Now()
        event.save(update_fields=["available_at"])
        event.refresh_from_db(fields=["available_at"])
        outbox_notify()
    return event


def outbox_release_deferred(*, queue: str) -> int:
    """A capacity slot freed: make the rows deferred on ``queue`` due now, and wake."""
    count = OutboxEvent.objects.filter(
        status=OutboxStatus.PENDING,
        queue=queue,
        outcome="deferred",
        available_at__gt=Now(),
    ).update(available_at=Now())
    outbox_notify()
    return count


def counter_bump(name: str, by: int = 1) -> None:
    """Add to this minute's counter ``name``. Runs in its own short transaction if none."""
    if by <= 0:
        return
    minute = timezone.now().replace(second=0, microsecond=0)
    for _ in range(3):
        if RelayCounter.objects.filter(minute=minute, name=name).update(count=F("count") + by):
            return
        try:
            with transaction.atomic():
                RelayCounter.objects.create(minute=minute, name=name, count=by)
            return
        except IntegrityError:
            continue
    log.warning("counter %s not bumped after 3 tries", name)


# --- counters buffered per process (the relay's hot path) ------------------------------------

FLUSH_EVERY = 1.0  # seconds
_buffer: dict[str, int] = {}
_buffer_lock = threading.Lock()
_buffering_pid: int | None = None


def counter_add(name: str, by: int = 1) -> None:
    """Add to counter ``name``: buffered where ``counters_buffer_start()`` ran in this
    process (written at most ``FLUSH_EVERY`` late, and at a clean exit), else at once."""
    if by <= 0:
        return
    if _buffering_pid != os.getpid():
        counter_bump(name, by)
        return
    with _buffer_lock:
        _buffer[name] = _buffer.get(name, 0) + by


def counters_flush() -> None:
    """Write what this process buffered (one UPDATE per counter name, not per event)."""
    with _buffer_lock:
        pending = dict(_buffer)
        _buffer.clear()
    for name, by in pending.items():
        try:
            counter_bump(name, by)
        except Exception:  # noqa: BLE001 - statistics never stop the relay
            log.exception("counter %s: %s lost", name, by)


def counters_buffer_start() -> None:
    """Buffer this process's relay counters from now on (dispatcher, django-q2 workers).

    A thread of its own writes them every ``FLUSH_EVERY``; a clean exit (``atexit``, and
    multiprocessing's exit of a recycled or stopped django-q2 worker) writes the rest.
    Counts of a process killed by a signal in its last second are lost: they are
    statistics, never state.
    """
    global _buffering_pid
    pid = os.getpid()
    if _buffering_pid == pid:
        return
    with _buffer_lock:
        _buffer.clear()  # a forked child starts empty: its parent writes its own counts
    _buffering_pid = pid
    threading.Thread(target=_flush_loop, args=(pid,), name="counters", daemon=True).start()
    atexit.register(counters_flush)
    from multiprocessing import util

    util.Finalize(None, counters_flush, exitpriority=10)


def _flush_loop(pid: int) -> None:
    stop = threading.Event()
    while os.getpid() == pid and not stop.wait(FLUSH_EVERY):
        if _buffer:
            close_old_connections()
            counters_flush()
            close_old_connections()  # a pooled connection goes back at once


def counters_since(since: dt.datetime) -> dict[str, int]:
    totals: dict[str, int] = {}
    for name, count in RelayCounter.objects.filter(minute__gte=since).values_list("name", "count"):
        totals[name] = totals.get(name, 0) + count
    return totals
