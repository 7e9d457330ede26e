"""Liveness marks of the installation's processes, and the cold start they let the
first dispatcher decide.

Every dispatcher, every cluster's pusher (``outbox.broker``) and the monitor renew a
mark every ``poll_interval`` (``process_beat``). A cold start is the first dispatcher
to start when none of these processes has been alive for ``COLD_AFTER`` poll
intervals: the whole installation was down (a crash, a reboot, a deploy that stopped
everything). A restart of one process while others run (the dispatcher while the
clusters and the monitor go on) is not one. Apps register what to do at a cold start
(``on_cold_start``); the relay itself knows nothing of what they do.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Callable

from django.db import connection, transaction
from django.db.models.functions import Now

from outbox import conf
from outbox.models import DispatcherBeat

log = logging.getLogger(__name__)

COLD_AFTER = 10  # poll intervals without any live process
DISPATCHER = "dispatcher"
PUSHER = "pusher"
MONITOR = "monitor"
_callbacks: list[Callable[[], None]] = []


def on_cold_start(callback: Callable[[], None]) -> None:
    """Run ``callback()`` when a dispatcher finds it starts cold.

    It runs inside the deciding transaction, under the start lock (so exactly one
    dispatcher runs it, and others starting meanwhile wait and then see a live mark).
    It may write rows (outbox rows, state changes) and must not call engines.
    """
    _callbacks.append(callback)


def beat_name(kind: str = DISPATCHER) -> str:
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def dispatcher_start(*, name: str) -> bool:
    """Record this dispatcher as alive; True (and the callbacks run) at a cold start.

    1. Serialize starts: an advisory lock on PostgreSQL, the IMMEDIATE write lock on
       SQLite (the transaction's first write).
    2. Warm when, within ``COLD_AFTER * poll_interval``, a dispatcher beat (it decided
       when it started, under this lock), or another process (a pusher, the monitor)
       beat that was already alive before that window: it ran while this dispatcher was
       away. A process that started within the window is part of this same start (the
       clusters of a restarted installation may come up before its dispatcher) and says
       nothing either way. Otherwise cold.
    3. Write this dispatcher's mark, run the callbacks if cold, commit.
    """
    window = dt.timedelta(seconds=COLD_AFTER * conf.value("poll_interval"))
    with transaction.atomic():
        if conf.is_postgres(connection):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('outbox:start'))")
        DispatcherBeat.objects.filter(beat_at__lt=Now() - window * 100).delete()
        recent = DispatcherBeat.objects.filter(beat_at__gte=Now() - window)
        cold = not (
            recent.filter(kind=DISPATCHER).exists()
            or recent.exclude(kind=DISPATCHER).filter(started_at__lt=Now() - window).exists()
        )
        DispatcherBeat.objects.update_or_create(
            name=name, defaults={"kind": DISPATCHER, "started_at": Now(), "beat_at": Now()}
        )
        if cold:
            log.warning("cold start: no dispatcher alive in the last %ss", window.seconds)
            for callback in _callbacks:
                callback()
    return cold


def process_beat(*, name: str, kind: str = DISPATCHER) -> None:
    """Renew this process's mark, made on its first beat (its own short statement)."""
    if not DispatcherBeat.objects.filter(name=name).update(beat_at=Now()):
        DispatcherBeat.objects.create(name=name, kind=kind, started_at=Now(), beat_at=Now())


def dispatcher_gone(*, name: str) -> None:
    """Drop this dispatcher's mark at a clean stop (other processes' marks simply
    age: a clean stop of every process then reads as down, as it is)."""
    DispatcherBeat.objects.filter(name=name).delete()
