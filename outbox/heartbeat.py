"""Keep a started handler's claim alive while its worker lives, and no longer.

A started row's lease is short (``liveness_timeout``) and renewed by a thread of the
worker process every third of it, never past ``started_at + delivery_timeout +
lease_margin``. So:
- a worker that dies mid-handler (SIGKILL, OOM, a lost host) stops renewing, and its
  row is due again (and its capacity slot free) within ``liveness_timeout``;
- a slow but alive handler keeps its claim for its whole ``delivery_timeout``.
Renewals are compare-and-sets on (id, claim token, ``processing``) on the database's
clock: once the outcome is recorded, or the claim was lost, a renewal changes nothing.
The thread uses its own database connection and closes it when it stops.
"""

from __future__ import annotations

import logging
import threading
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


class Heartbeat:
    """``with Heartbeat(event_id, token):`` renews the claim while the block runs."""

    def __init__(self, event_id: int, token: uuid.UUID) -> None:
        self.event_id, self.token = event_id, token
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"outbox-heartbeat-{event_id}")
        self.thread.daemon = True

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stopped.set()
        self.thread.join()

    def _run(self) -> None:
        interval = conf.liveness().total_seconds() / 3
        try:
            while not self.stopped.wait(interval):
                try:
                    if not lease_renew(event_id=self.event_id, token=self.token):
                        log.warning(
                            "outbox #%s: claim %s no longer ours; heartbeat stops",
                            self.event_id,
                            self.token,
                        )
                        return
                except Exception:  # noqa: BLE001 - a missed beat is retried; the lease covers it
                    log.warning("outbox #%s: lease renewal failed", self.event_id, exc_info=True)
                    connection.close()
        finally:
            connection.close()
