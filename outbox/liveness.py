"""Dispatcher liveness marks, and the cold start they let the first dispatcher decide.

A cold start is the first dispatcher to start when none has been alive for
``COLD_AFTER`` poll intervals: the whole installation was down (a crash, a reboot, a
deploy that stopped everything). A restart of one process while another dispatcher
runs is not one. Apps register what to do at a cold start (``on_cold_start``); the relay
itself knows nothing of what they do.
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

COLD_AFTER = 10  # poll intervals without any live dispatcher
_callbacks: list[Callable[[], None]] = []


def on_cold_start(callback: Callable[[], None]) -> None:
    """Run ``callback()`` when a dispatcher finds it starts cold.

    It runs inside the deciding transaction, under the start lock (so exactly one
    dispatcher runs it, and others starting meanwhile wait and then see a live mark).
    It may write rows (outbox rows, state changes) and must not call engines.
    """
    _callbacks.append(callback)


def beat_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def dispatcher_start(*, name: str) -> bool:
    """Record this dispatcher as alive; True (and the callbacks run) at a cold start.

    1. Serialize starts: an advisory lock on PostgreSQL, the IMMEDIATE write lock on
       SQLite (the transaction's first write).
    2. Cold when no mark is younger than ``COLD_AFTER * poll_interval``.
    3. Write this dispatcher's mark, run the callbacks if cold, commit.
    """
    window = dt.timedelta(seconds=COLD_AFTER * conf.value("poll_interval"))
    with transaction.atomic():
        if conf.is_postgres(connection):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('outbox:start'))")
        DispatcherBeat.objects.filter(beat_at__lt=Now() - window * 100).delete()
        cold = not DispatcherBeat.objects.filter(beat_at__gte=Now() - window).exists()
        DispatcherBeat.objects.update_or_create(
            name=name, defaults={"started_at": Now(), "beat_at": Now()}
        )
        if cold:
            log.warning("cold start: no dispatcher alive in the last %ss", window.seconds)
            for callback in _callbacks:
                callback()
    return cold


def dispatcher_beat(*, name: str) -> None:
    """Renew this dispatcher's mark (its own short statement)."""
    if not DispatcherBeat.objects.filter(name=name).update(beat_at=Now()):
        DispatcherBeat.objects.create(name=name, started_at=Now(), beat_at=Now())


def dispatcher_gone(*, name: str) -> None:
    """Drop this dispatcher's mark at a clean stop."""
    DispatcherBeat.objects.filter(name=name).delete()
