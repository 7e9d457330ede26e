"""Keep a started handler's claim alive while its worker lives, and no longer.

A started row's lease is short (``liveness_timeout``) and renewed by a thread of the
worker process every third of it, never past ``started_at + delivery_timeout +
lease_margin``. So:
- a worker that dies mid-handler (SIGKILL, OOM, a lost host) stops renewing, and its
  row is due again (and its capacity slot free) within ``liveness_timeout``;
- a slow but alive handler keeps its claim for its whole ``delivery_timeout``.
Renewals are compare-and-sets on (id, claim token, ``processing``) on the database's
clock: once the outcome is recorded, or the claim was lost, a renewal changes nothing.
One thread per process renews every running block's claim (``_Beater``); it uses its
own database connection and closes it after each round of renewals. A renewal that is
still running when its block ends changes nothing (the outcome is recorded by then).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Least, Now

from outbox import conf
from outbox.models import OutboxEvent, OutboxStatus

log = logging.getLogger(__name__)


def lease_renew(*, event_id: int, token: uuid.UUID) -> bool:
    """Extend the claim's lease by ``liveness_timeout``, capped at its full lease.

    Returns False when the claim is no longer ours (finished, or reclaimed). A
    transaction of its own under ``write_timeout`` (a renewal never hangs the worker);
    idempotent.
    """
    with transaction.atomic():
        conf.limit_statements(connection)
        renewed = OutboxEvent.objects.filter(
            id=event_id,
            claim_token=token,
            status=OutboxStatus.PROCESSING,
            lease_expires_at__gt=Now(),
        ).update(lease_expires_at=Least(Now() + conf.liveness(), F("started_at") + conf.lease()))
    return renewed == 1


class _Beater:
    """The one thread of a process that renews the claims of its running ``Heartbeat``
    blocks, each every third of ``liveness_timeout`` from when its block began.

    Started on first use (again in a forked child, where the parent's thread is gone);
    it sleeps while no block runs, and closes its database connection after each round
    of renewals, so it holds none in between. One thread for the process, not one per
    handler: starting and joining a thread per row cost the relay more than its writes.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a lock held across a fork stays held

    def _reset(self) -> None:
        self.cond = threading.Condition()
        self.claims: dict[object, list] = {}  # block -> [event_id, token, next renewal]
        self.pid: int | None = None

    def add(self, block: object, event_id: int, token: uuid.UUID) -> None:
        with self.cond:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                thread = threading.Thread(target=self._run, name="outbox-heartbeat", daemon=True)
                thread.start()
            self.claims[block] = [event_id, token, time.monotonic() + self.interval()]
            self.cond.notify()

    def remove(self, block: object) -> None:
        with self.cond:
            self.claims.pop(block, None)

    @staticmethod
    def interval() -> float:
        return conf.liveness().total_seconds() / 3

    def _due(self) -> list[tuple[object, int, uuid.UUID]]:
        """Wait until a claim is due for renewal; those due, their next renewal set."""
        with self.cond:
            while True:
                now = time.monotonic()
                due = [(b, c[0], c[1]) for b, c in self.claims.items() if c[2] <= now]
                if due:
                    for block, _, _ in due:
                        self.claims[block][2] = now + self.interval()
                    return due
                nearest = min((c[2] for c in self.claims.values()), default=None)
                self.cond.wait(None if nearest is None else nearest - now)

    def _run(self) -> None:
        while True:
            for block, event_id, token in self._due():
                try:
                    if not lease_renew(event_id=event_id, token=token):
                        log.warning(
                            "outbox #%s: claim %s no longer ours; heartbeat stops", event_id, token
                        )
                        self.remove(block)
                except Exception:  # noqa: BLE001 - a missed beat is retried; the lease covers it
                    log.warning("outbox #%s: lease renewal failed", event_id, exc_info=True)
            connection.close()


_beater = _Beater()


class Heartbeat:
    """``with Heartbeat(event_id, token):`` renews the claim while the block runs."""

    def __init__(self, event_id: int, token: uuid.UUID) -> None:
        self.event_id, self.token = event_id, token

    def __enter__(self) -> Heartbeat:
        _beater.add(self, self.event_id, self.token)
        return self

    def __exit__(self, *_exc) -> None:
        _beater.remove(self)
