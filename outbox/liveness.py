"""Liveness marks of the installation's processes, and the cold start they let the
first dispatcher decide.

Every dispatcher, every cluster's pusher (``outbox.broker``) and the monitor renew a
mark every ``poll_interval`` (``process_beat``). A cold start is the first dispatcher
to start when none of these processes has been alive for ``COLD_AFTER`` poll
intervals: the whole installation was down (a crash, a reboot, a deploy that stopped
everything). A restart of one process while others run (the dispatcher while the
clusters and the monitor go on) is not one. Apps register what to do at a cold start
(``on_cold_start``); the relay itself knows nothing of what they do.

The same marks tell whether one process is healthy (``manage.py health``, the probes of
deploy/kubernetes/ and the systemd units): a mark is named ``KIND:HOST:PID:RANDOM``
(``beat_name``), so a process's host finds its own marks (``mark_prefix``), and a mark
not renewed within ``alive_window()`` is a process that is gone or wedged.
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


def alive_window() -> dt.timedelta:
    """A process whose mark is older than this is not alive: ``COLD_AFTER`` poll intervals."""
    return dt.timedelta(seconds=COLD_AFTER * conf.value("poll_interval"))


def cluster_kind(queue: str) -> str:
    """The name part of a cluster's pusher marks (their ``kind`` column is ``PUSHER``)."""
    return f"{PUSHER}-{queue}"


def mark_prefix(kind: str, host: str | None = None) -> str:
    """What the names of ``kind``'s marks begin with: on ``host``, or on any host (None)."""
    return f"{kind}:" if host is None else f"{kind}:{host}:"


def beat_name(kind: str = DISPATCHER) -> str:
    return f"{mark_prefix(kind, socket.gethostname())}{os.getpid()}:{uuid.uuid4().hex[:8]}"


def dispatcher_start(*, name: str) -> bool:
    """Record this dispatcher as alive; True (and the callbacks run) at a cold start.

    1. Serialize starts: an advisory lock on PostgreSQL, the IMMEDIATE write lock on
       SQLite (the transaction's first write).
    2. Warm when, within ``COLD_AFTER * poll_interval``, a dispatcher beat (it decided
       when it started, under this lock), or another live process (a pusher, the
       monitor) had started before the last beat of the dispatcher that ran before:
       it lived through the dispatcher's absence, so the installation never went
       down. A process that started after that beat (the clusters of a rebooted
       installation come up before its dispatcher, seconds or minutes) belongs to
       this same start and says nothing either way. Otherwise cold; and cold when no
       dispatcher ever beat.
    3. Write this dispatcher's mark, run the callbacks if cold, commit.
    """
    window = alive_window()
    with transaction.atomic():
        if conf.is_postgres(connection):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('outbox:start'))")
        dispatchers = DispatcherBeat.objects.filter(kind=DISPATCHER)
        last = dispatchers.order_by("-beat_at").values_list("pk", "beat_at").first()
        # Old marks go, but for the last dispatcher's: its last beat is what step 2 asks.
        DispatcherBeat.objects.filter(beat_at__lt=Now() - window * 100).exclude(
            pk=last[0] if last else None
        ).delete()
        recent = DispatcherBeat.objects.filter(beat_at__gte=Now() - window)
        cold = not (
            recent.filter(kind=DISPATCHER).exists()
            or (
                last is not None
                and recent.exclude(kind=DISPATCHER).filter(started_at__lte=last[1]).exists()
            )
        )
        DispatcherBeat.objects.update_or_create(
            name=name, defaults={"kind": DISPATCHER, "started_at": Now(), "beat_at": Now()}
        )
        if cold:
            log.warning(
                "installation restarted after being down: no gobrave process was alive for "
                "%d s before dispatcher %s started (last dispatcher seen %s); recovering what "
                "the stopped processes left (%d recovery step(s) the apps registered)",
                window.total_seconds(),
                name,
                last[1].isoformat() if last else "never",
                len(_callbacks),
            )
            for callback in _callbacks:
                callback()
    return cold


def process_beat(*, name: str, kind: str = DISPATCHER) -> None:
    """Renew this process's mark, made on its first beat (its own short statement)."""
    if not DispatcherBeat.objects.filter(name=name).update(beat_at=Now()):
        DispatcherBeat.objects.create(name=name, kind=kind, started_at=Now(), beat_at=Now())


def dispatcher_gone(*, name: str) -> None:
    """Leave this dispatcher's mark at a clean stop, its last beat now: a later start
    asks whether anything lived through its absence (a clean stop of every process
    then reads as down, as it is; of the dispatcher alone, as not)."""
    DispatcherBeat.objects.filter(name=name).update(beat_at=Now())
