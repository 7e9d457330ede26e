"""The dispatcher loop: claim due rows and hand them to the worker clusters.

1. Reap nothing by hand: expired leases are simply due again in the claim query.
2. For each registered queue, claim up to ``batch_size`` rows within its in-flight
   limit and hand each to django-q2 (``cluster`` = the queue's name). With the ORM
   broker the hand-off commits with the claim; otherwise a lost hand-off is recovered
   when the lease expires.
3. Purge old ``sent`` rows now and then.
4. Sleep until NOTIFY (PostgreSQL) or ``poll_interval``, whichever comes first.
A SIGTERM sets a flag; the loop finishes the step in hand and returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from outbox import conf, registry, relay

log = logging.getLogger(__name__)

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


class Dispatcher:
    """One dispatcher process. Any number may run against one database."""

    def __init__(self, *, send: Sender = send_to_django_q) -> None:
        self.send = send
        self.stopping = threading.Event()
        self.listener = None
        self.last_purge = 0.0

    def stop(self, *_args) -> None:
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def cycle(self) -> int:
        """Claim and hand off one batch per queue; return how many rows were handed off."""
        close_old_connections()
        handed = 0
        for queue in registry.queues():
            if _orm_broker():
                # Claim and hand-off in one transaction: both commit or neither does.
                with transaction.atomic():
                    claimed = relay.claim(queue, conf.value("batch_size"))
                    for event_id, token in claimed:
                        self.send(queue, event_id, str(token))
            else:
                claimed = relay.claim(queue, conf.value("batch_size"))
                for event_id, token in claimed:
                    self.send(queue, event_id, str(token))
            handed += len(claimed)
        if time.monotonic() - self.last_purge > 300:
            self.last_purge = time.monotonic()
            purged = relay.purge_sent()
            if purged:
                log.info("purged %s sent outbox rows past retention", purged)
        return handed

    def run(self) -> None:
        log.info("dispatcher %s started (queues: %s)", os.getpid(), registry.queues())
        while not self.stopping.is_set():
            try:
                handed = self.cycle()
            except Exception:  # noqa: BLE001 - the loop outlives a failed cycle
                log.exception("dispatcher cycle failed; retrying after poll_interval")
                handed = 0
                self._close_listener()
            if handed == 0 and not self.stopping.is_set():
                self.wait(conf.value("poll_interval"))
        self._close_listener()
        log.info("dispatcher %s stopped", os.getpid())

    # --- wake-up ------------------------------------------------------------------------

    def wait(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, waking early on NOTIFY."""
        listener = self._listener()
        if listener is None:
            self.stopping.wait(timeout)
            return
        try:
            ready, _, _ = select.select([listener.fileno()], [], [], timeout)
            if ready:
                for _ in listener.notifies(timeout=0):
                    pass
        except Exception:  # noqa: BLE001 - a broken listener falls back to polling
            log.warning("LISTEN connection lost; polling until it is back")
            self._close_listener()

    def _listener(self):
        if connection.vendor != "postgresql":
            return None
        if self.listener is None or self.listener.closed:
            try:
                import psycopg

                params = connection.get_connection_params()
                params.pop("cursor_factory", None)
                params.pop("context", None)
                params.pop("prepare_threshold", None)
                params["application_name"] = "gobrave-dispatcher-listen"
                self.listener = psycopg.connect(autocommit=True, **params)
                self.listener.execute(f"LISTEN {conf.NOTIFY_CHANNEL}")
            except Exception as exc:  # noqa: BLE001
                log.warning("cannot LISTEN (%s); polling only", exc)
                self.listener = None
        return self.listener

    def _close_listener(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(Exception):
                self.listener.close()
            self.listener = None
