"""The dispatcher loop: claim due rows and hand them to the worker clusters.

1. Reap nothing by hand: expired leases are simply due again in the claim query.
2. For each registered queue, claim up to ``batch_size`` rows within its in-flight
   limit, all queues in one transaction, and hand each to django-q2 (``cluster`` = the
   queue's name). With gobrave's broker (``outbox.broker``, PostgreSQL) the hand-off is
   a NOTIFY in the claim's transaction: the claimed row itself is the task. With
   django-q2's ORM broker (SQLite) the task row commits with the claim. With Redis a
   lost hand-off is recovered when the lease expires.
3. Purge old ``sent`` rows now and then.
4. Unless a queue filled its batch, sleep until NOTIFY (PostgreSQL) or
   ``poll_interval``, whichever comes first. With gobrave's broker the clusters' pushers
   claim on NOTIFY (``outbox.broker``); the dispatcher only polls, the safety net that
   claims what no pusher took.
At start (``run``) the dispatcher records its liveness mark and, when it starts cold,
runs the apps' cold-start callbacks (``outbox.liveness``; the clusters' pushers and the
monitor keep marks too, so a dispatcher restarted alone is no cold start); it renews
the mark every ``poll_interval`` and drops it at a clean stop.
A SIGTERM sets a flag; the loop finishes the step in hand and returns.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import select
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from core.counters import counters_roll_up
from core.loops import StopOnSignal
from core.retention import retention_run
from core.tallies import FOLD_EVERY, tallies_fold, tallies_kept
from outbox import conf, listen, liveness, registry, relay

log = logging.getLogger(__name__)
STOP_CHECK = 0.25  # seconds: the longest a stop waits for a sleeping dispatcher

Sender = Callable[[str, int, str], None]


def send_to_django_q(queue: str, event_id: int, token: str) -> None:
    from django_q.tasks import async_task

    async_task(
        "outbox.tasks.execute",
        event_id,
        token,
        cluster=queue,
        task_name=f"outbox-{event_id}-{token[:8]}",
        save=False,
    )


def _orm_broker() -> bool:
    return "orm" in getattr(settings, "Q_CLUSTER", {})


def default_sender() -> Sender:
    """gobrave's broker takes the claim itself as the hand-off (a NOTIFY in the claim's
    transaction); any other broker gets a django-q2 task per row."""
    if conf.database_broker():
        from outbox.broker import handoff

        return handoff
    return send_to_django_q


class Dispatcher(StopOnSignal):
    """One dispatcher process. Any number may run against one database."""

    def __init__(self, *, send: Sender | None = None) -> None:
        self.send = send or default_sender()
        self.stopping = threading.Event()
        self.listener = None
        self.last_purge = 0.0
        self.last_fold = 0.0
        self.more = False
        self.name = liveness.beat_name()
        self.last_beat = 0.0

    def cycle(self) -> int:
        """Claim and hand off one batch per queue; return how many rows were handed off.

        Every queue's claim runs in one transaction (one commit per cycle). With a broker
        in the database the hand-off is part of that transaction: both commit or neither
        does. With Redis the rows are sent after the commit; a lost hand-off comes back
        when its lease expires. ``self.more`` says whether a queue filled its batch (more
        may be due at once) or the loop may sleep until NOTIFY.
        """
        close_old_connections()
        batch, in_db = conf.value("batch_size"), _orm_broker()
        claims: dict[str, list] = {}
        with transaction.atomic():
            for queue in registry.queues():
                claims[queue] = relay.claim(queue, batch)
                if in_db:
                    for event_id, token in claims[queue]:
                        self.send(queue, event_id, str(token))
        if not in_db:
            for queue, claimed in claims.items():
                for event_id, token in claimed:
                    self.send(queue, event_id, str(token))
        self.more = any(len(claimed) >= batch for claimed in claims.values())
        handed = sum(len(claimed) for claimed in claims.values())
        if time.monotonic() - self.last_purge > settings.GOBRAVE["retention"]["interval"]:
            self.last_purge = time.monotonic()
            retention_run()  # every app's purges (core.retention), sent rows among them
            counters_roll_up(dt.timedelta(seconds=conf.value("retention")))
        if tallies_kept() and time.monotonic() - self.last_fold > FOLD_EVERY:
            self.last_fold = time.monotonic()
            tallies_fold()
        return handed

    def beat(self) -> None:
        if time.monotonic() - self.last_beat >= conf.value("poll_interval"):
            self.last_beat = time.monotonic()
            liveness.process_beat(name=self.name)

    def run(self) -> None:
        log.info("dispatcher %s started (queues: %s)", os.getpid(), registry.queues())
        while not self.stopping.is_set():
            try:
                liveness.dispatcher_start(name=self.name)
                self.last_beat = time.monotonic()
                break
            except Exception:  # noqa: BLE001 - the database may not be up yet
                log.exception("dispatcher start failed; retrying after poll_interval")
                self.stopping.wait(conf.value("poll_interval"))
        while not self.stopping.is_set():
            try:
                self.beat()
                # LISTEN before the claim: a row committed after the claim wakes the wait
                # that follows (its NOTIFY waits on the socket), not the next poll.
                self._listener()
                self.cycle()
            except Exception:  # noqa: BLE001 - the loop outlives a failed cycle
                log.exception("dispatcher cycle failed; retrying after poll_interval")
                self.more = False
                self._close_listener()
            if not self.more and not self.stopping.is_set():
                self.wait(conf.value("poll_interval"))
        self._close_listener()
        with contextlib.suppress(Exception):
            liveness.dispatcher_gone(name=self.name)
        log.info("dispatcher %s stopped", os.getpid())

    # --- wake-up ------------------------------------------------------------------------

    def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, waking early on NOTIFY or a stop.

        The LISTEN socket is watched in slices of at most ``STOP_CHECK`` seconds, so a
        stop (SIGTERM: ``select`` resumes after the handler; or ``stop()`` from another
        thread) ends the wait within that, whatever ``poll_interval`` is."""
        listener = self._listener()
        if listener is None:
            self.stopping.wait(timeout)
            return
        deadline = time.monotonic() + timeout
        try:
            while not self.stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                ready, _, _ = select.select([listener.fileno()], [], [], min(left, STOP_CHECK))
                if ready:
                    for _ in listener.notifies(timeout=0):
                        pass
                    return
        except Exception:  # noqa: BLE001 - a broken listener falls back to polling
            log.warning("LISTEN connection lost; polling until it is back")
            self._close_listener()

    def _listener(self):
        if connection.vendor != "postgresql" or self._pushers_listen():
            return None
        if self.listener is None or self.listener.closed:
            try:
                self.listener = listen.connect("gobrave-dispatcher-listen")
                self.listener.execute(f"LISTEN {conf.NOTIFY_CHANNEL}")
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot LISTEN (%s); polling only", exc)
                self.listener = None
        return self.listener

    def _pushers_listen(self) -> bool:
        """With gobrave's broker the clusters' pushers claim on NOTIFY themselves; a
        dispatcher that LISTENed too would only race them for the same rows."""
        if self.send is send_to_django_q:
            return False
        from outbox.broker import handoff

        return self.send is handoff

    def _close_listener(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(Exception):
                self.listener.close()
            self.listener = None
