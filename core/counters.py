"""Bump and read the per-minute ``Counter`` rows (the names are each app's own enum).

``counter_bump`` is safe from any process and any thread: one ``F()`` update, or an
insert that a concurrent insert of the same minute turns back into an update.
``counter_add`` is the same, buffered per process where ``counters_buffer_start()`` ran
(the relay's hot path: one UPDATE per name per second, not per event).
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import os
import threading
from collections.abc import Iterable

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from core.models import Counter

log = logging.getLogger(__name__)


def counter_bump(name: str, by: int = 1) -> None:
    """Add ``by`` to this minute's counter ``name``.

    Runs in the caller's transaction if there is one (so a rolled-back change is not
    counted), else in its own short one. Never raises for a lost race: it retries the
    update three times, then logs.
    """
    if by <= 0:
        return
    _bump(name, by, timezone.now().replace(second=0, microsecond=0))


def _bump(name: str, by: int, minute: dt.datetime) -> None:
    for _ in range(3):
        if Counter.objects.filter(minute=minute, name=name).update(count=F("count") + by):
            return
        try:
            with transaction.atomic():
                Counter.objects.create(minute=minute, name=name, count=by)
            return
        except IntegrityError:
            continue
    log.warning("counter %s not bumped after 3 tries", name)


# --- counters buffered per process (the relay's hot path) ------------------------------------

FLUSH_EVERY = 1.0  # seconds
_buffer: dict[str, int] = {}
_buffer_lock = threading.Lock()
_buffering_pid: int | None = None
_flusher: tuple[threading.Thread, threading.Event] | None = None


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
    global _buffering_pid, _flusher
    pid = os.getpid()
    if _buffering_pid == pid:
        return
    with _buffer_lock:
        _buffer.clear()  # a forked child starts empty: its parent writes its own counts
    _buffering_pid = pid
    stop = threading.Event()
    thread = threading.Thread(target=_flush_loop, args=(pid, stop), name="counters", daemon=True)
    thread.start()
    _flusher = (thread, stop)
    atexit.register(counters_flush)
    from multiprocessing import util

    util.Finalize(None, counters_flush, exitpriority=10)


def counters_buffer_stop() -> None:
    """Stop buffering in this process: its flush thread ends, what it buffered is written,
    and later counts are written at once. A no-op where buffering never started (an
    embedding process, such as a test run, that started it in-process calls this)."""
    global _buffering_pid, _flusher
    if _buffering_pid != os.getpid() or _flusher is None:
        return
    thread, stop = _flusher
    _buffering_pid, _flusher = None, None
    stop.set()
    thread.join(10)
    counters_flush()


def _flush_loop(pid: int, stop: threading.Event) -> None:
    while os.getpid() == pid and not stop.wait(FLUSH_EVERY):
        if _buffer:
            counters_flush()
            # Closed after each flush (a pooled one goes back): a thread that writes once
            # a second holds no connection of its own in between.
            connection.close()


# --- rolling old minutes up (the dispatcher's housekeeping) ---------------------------------

#: The minute that holds every rolled-up count: before any real minute, so windows
#: (``counters_since``, ``counter_rows``) never see it, while ``counter_totals`` does.
ROLLUP_MINUTE = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def counters_roll_up(older_than: dt.timedelta) -> int:
    """Fold the per-minute rows older than ``older_than`` into one row per name at
    ``ROLLUP_MINUTE``; returns how many minute rows went.

    Totals since the counters began (``/metrics``, whose counters must never go down)
    stay exact; only the per-minute detail of old minutes is dropped, so the table
    stays small. One short transaction; ``DELETE ... RETURNING`` hands each row's count
    to exactly one of several dispatchers doing this at once.
    """
    cutoff = timezone.now() - older_than
    table = connection.ops.quote_name(Counter._meta.db_table)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE minute < %s AND minute > %s RETURNING name, count",
                [cutoff, ROLLUP_MINUTE],
            )
            deleted = cursor.fetchall()
        sums: dict[str, int] = {}
        for name, count in deleted:
            sums[name] = sums.get(name, 0) + count
        for name, by in sums.items():
            _bump(name, by, ROLLUP_MINUTE)
    return len(deleted)


def counters_since(since: dt.datetime) -> dict[str, int]:
    """``{name: total}`` of every counter over the minutes from ``since`` on."""
    rows = (
        Counter.objects.filter(minute__gte=since)
        .order_by()
        .values_list("name")
        .annotate(total=Sum("count"))
    )
    return dict(rows.values_list("name", "total"))


def counter_totals(names: Iterable[str]) -> dict[str, int]:
    """``{name: total}`` since the counters began (missing names are 0)."""
    names = list(names)
    rows = (
        Counter.objects.filter(name__in=names)
        .order_by()
        .values_list("name")
        .annotate(total=Sum("count"))
        .values_list("name", "total")
    )
    return {**dict.fromkeys(names, 0), **dict(rows)}


def counter_rows(*, names: Iterable[str], start: dt.datetime, end: dt.datetime):
    """``(minute, name, count)`` rows of ``names`` in ``[start, end)``, for charts."""
    return Counter.objects.filter(
        name__in=list(names), minute__gte=start, minute__lt=end
    ).values_list("minute", "name", "count")
