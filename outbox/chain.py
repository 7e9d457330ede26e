"""A worker that finishes a row claims its next row in the outcome's transaction, and runs it.

At ``prefetch: 0`` (rows in flight = the workers) a worker would otherwise wait, after
every row, for its cluster's pusher to be woken by the outcome, claim one row and hand
it over (most of a worker's time on short rows: ``docs/benchmarks.md``). Here the worker
takes the next row itself:

1. **Outcome and claim are one transaction.** A success (``sent``, ``superseded``) of the
   worker's live claim is recorded by the usual compare-and-set on its token, and in the
   same transaction the worker claims one due row of the same queue as ``relay.claim()``
   would: lease-expired rows first, then pending rows round-robin by fairness key (the
   key least recently served first, its oldest row), never a row that has an older
   unfinished row of its aggregate, ``FOR UPDATE SKIP LOCKED``; the queue's claim guard
   decides (``registry.register_claim_guard``), the key gets its turn, a reclaimed row
   counts its attempt or reclaim. Any error in the claim rolls the whole transaction
   back and the outcome is recorded on its own (``relay._finish``): an outcome is never
   lost to its claim.
2. **Rows in flight never grow.** The claim only replaces the worker's own claim of the
   same queue that this transaction finishes, and only while that claim's lease is live
   (counted as in flight by every other claimer): one row out, one in, in one commit. It
   holds the claim lock shared (``relay.claim`` takes it exclusive), so a claimer never
   counts while a chain is between its row out and its row in (a lease that ran out
   meanwhile would otherwise read as room); chains do not wait for each other. Only
   where each queue's own limit binds: with a ``max_in_flight`` below the sum of the
   queues' limits, a chain would keep a global slot from another queue, so no worker
   chains (``global_cap_binds``). Two chains at the same instant may both serve the
   least served key (``SKIP LOCKED`` gives the second its next row): fair share's grain
   is then one row per worker.
3. **One execution per claim.** The claim is its own start: the row is claimed with
   ``started_at`` set, under a fresh token and the started lease (``conf.started_lease``,
   renewed by the worker's heartbeat), and handed to no one else, so there is no second
   delivery to refuse. A worker killed at any point leaves a started row whose lease
   runs out, as when it is killed mid-handler.
4. **Bounded.** A row is chained only while its task began less than ``budget`` seconds
   ago, checked when the row is claimed (``conf.chain_budget``: django-q2's timeout then
   still leaves every chained row its whole ``delivery_timeout``, however long the rows
   before it ran). A cluster told to stop (SIGTERM to its main: django-q2 then stops each
   worker after its task) sees its workers begin new rows for at most that budget more;
   a worker that got a SIGTERM itself (``outbox.stopping``) chains nothing, and a row
   claimed just before one is put back, due at once, no attempt counted.
5. **Wake-ups.** An outcome that chains nothing wakes the pushers if any row is due (a
   slot freed). One that chains still wakes them when a row of the finished row's
   aggregate on another queue is due (it waited behind this one: order per instance).
PostgreSQL only (``relay.execute`` runs elsewhere).
"""

from __future__ import annotations

import logging
import time
import uuid

from django.db import connection, transaction

from core.counters import counter_add
from outbox import conf, picking, registry, relay, stopping
from outbox.counters import RelayStat
from outbox.heartbeat import Heartbeat
from outbox.models import OutboxEvent, OutboxStatus
from outbox.outcomes import Outcome
from outbox.services import outbox_notify_if_due

log = logging.getLogger(__name__)

_T = OutboxEvent._meta.db_table


# The claim lock, shared (point 2).
_SHARED_LOCK = f"SELECT pg_advisory_xact_lock_shared({picking.CLAIM_LOCK})"
# The success of the worker's own claim, only while its lease is live (point 2).
_FINISH = f"""
UPDATE {_T} SET status = 'sent', outcome = %(outcome)s, sent_at = STATEMENT_TIMESTAMP(),
       lease_expires_at = NULL
WHERE id = %(id)s AND claim_token = %(token)s AND status IN ({picking.sources("sent")})
  AND lease_expires_at >= STATEMENT_TIMESTAMP()
"""
# A due row of the finished row's aggregate on another queue: wake its pushers (point 5).
_WAKE_BEHIND = f"""
SELECT pg_notify(%(channel)s, '') WHERE EXISTS (
    SELECT 1 FROM {_T} o WHERE o.aggregate_id = %(aggregate)s AND o.id > %(id)s
      AND o.queue <> %(queue)s AND o.status = 'pending'
      AND o.available_at <= STATEMENT_TIMESTAMP())
"""
# One due row of the queue, as ``relay.claim`` picks them (point 1), locked: a lease-expired
# one, else the oldest unblocked row of the first key (by turn) that has one; with the
# key's turn and the queue's last turn. The keys come one index probe each (a loose
# index scan, ``picking.DUE_KEYS``); each key's row is looked for only until one is
# found, so no other row is locked.
_PICK = f"""
WITH RECURSIVE {picking.DUE_KEYS}, expired AS (
    SELECT e.id, e.status, e.started_at, e.fairness_key, e.aggregate_id, NULL::bigint AS turn
    FROM {_T} e
    WHERE e.queue = %(queue)s AND e.status = 'processing'
      AND e.lease_expires_at < STATEMENT_TIMESTAMP() AND {picking.UNBLOCKED}
    ORDER BY e.id LIMIT 1 FOR UPDATE SKIP LOCKED
)
SELECT picked.*,
       (SELECT max(turn) FROM outbox_fairnessmark WHERE queue = %(queue)s) AS last_turn
FROM (
    SELECT * FROM expired
    UNION ALL
    (SELECT row.*, k.turn FROM (
        SELECT due.key, mark.turn FROM due
        LEFT JOIN outbox_fairnessmark mark ON mark.queue = %(queue)s AND mark.key = due.key
        WHERE due.key IS NOT NULL ORDER BY COALESCE(mark.turn, 0), due.key) k
     CROSS JOIN LATERAL (
        SELECT e.id, e.status, e.started_at, e.fairness_key, e.aggregate_id FROM {_T} e
        WHERE e.queue = %(queue)s AND e.status = 'pending'
          AND e.available_at <= STATEMENT_TIMESTAMP() AND e.fairness_key = k.key
          AND {picking.UNBLOCKED}
        ORDER BY e.id LIMIT 1 FOR UPDATE SKIP LOCKED) row
     WHERE NOT EXISTS (SELECT 1 FROM expired))
    LIMIT 1
) picked
"""
# The claim, which is also the start (point 3).
_CLAIM = f"""
UPDATE {_T} SET status = 'processing', claim_token = %(token)s,
       started_at = STATEMENT_TIMESTAMP(), lease_expires_at = STATEMENT_TIMESTAMP() + %(lease)s
WHERE id = %(id)s AND status IN ({picking.sources("processing")})
RETURNING *
"""


def usable(conn) -> bool:
    """PostgreSQL with client-side binding (several statements in one query)."""
    return conf.is_postgres(conn) and not conn.settings_dict["OPTIONS"].get("server_side_binding")


class Link:
    """One row's success, recorded by ``finish`` (``relay.run``'s ``finish``), and the next
    row it claimed (``next``, with its token), if any."""

    def __init__(self, queue: str, aggregate: str, *, until: float) -> None:
        self.queue, self.aggregate, self.until = queue, aggregate, until
        self.next: tuple[OutboxEvent, uuid.UUID] | None = None

    def finish(self, event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
        """Record a success; claim the next row only while the task's budget lasts (``until``,
        a ``time.monotonic()``), checked now, right before the claim (point 4)."""
        late = time.monotonic() >= self.until
        if late or target != OutboxStatus.SENT or stopping.asked():
            return relay._finish(event_id, token, target, **fields)
        try:
            with transaction.atomic():
                moved = self._finish_and_claim(event_id, token, fields["outcome"])
        except Exception as exc:  # noqa: BLE001 - the outcome is recorded alone, whatever failed
            log.warning(
                "outbox #%s: outcome with the next claim failed (%s); alone",
                event_id,
                exc,
                exc_info=True,
            )
            self.next = None
            if not connection.is_usable():
                connection.close()
            moved = False
        if not moved:  # a lease run out, a lost claim, an error: the outcome alone
            return relay._finish(event_id, token, target, **fields)
        if self.next is not None:
            counter_add(RelayStat.CLAIMED)
        return True

    def _finish_and_claim(self, event_id: int, token: uuid.UUID, outcome: str) -> bool:
        """Steps 1 and 2 in the caller's transaction; False (rolled back) if the claim was
        not ours or its lease ran out."""
        params = {
            "id": event_id,
            "token": token,
            "outcome": outcome,
            "queue": self.queue,
            "aggregate": self.aggregate,
            "channel": conf.NOTIFY_CHANNEL,
        }
        timeout = int(conf.value("write_timeout") * 1000)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SET LOCAL statement_timeout = {timeout}; {_SHARED_LOCK}; {_FINISH}; {_PICK};"
                f" {_WAKE_BEHIND}",
                params,
            )
            cursor.nextset()  # the lock
            cursor.nextset()
            moved = cursor.rowcount
            cursor.nextset()
            picked = cursor.fetchone()
        if moved != 1:
            transaction.set_rollback(True)
            return False
        rows = relay._guarded(self.queue, [picked[:5]] if picked else [])
        if not rows:
            outbox_notify_if_due()  # the slot this outcome freed is for someone else
            return True
        row_id, status, started_at, key, _aggregate = rows[0]
        if status == OutboxStatus.PENDING:
            turn, last = picked[5], picked[6] or 0
            relay._mark_served(self.queue, [key], {} if turn is None else {key: turn}, last)
        elif started_at:
            relay._count_crashes([row_id])
            relay.log_reclaims([row_id], [])
        else:
            relay._count_unstarted([row_id])
            relay.log_reclaims([], [row_id])
            counter_add(RelayStat.RECLAIMED_UNSTARTED)
        claim = uuid.uuid4()
        params = {"id": row_id, "token": claim, "lease": conf.started_lease()}
        found = list(OutboxEvent.objects.raw(_CLAIM, params))
        self.next = (found[0], claim) if found else None
        return True


def execute(event_id: int, token: uuid.UUID | str, *, budget: float) -> Outcome:
    """``relay.execute`` for a django-q2 worker: the delivered row, then each row the
    worker claims with an outcome, for ``budget`` seconds at most (see the module's
    docstring). Never raises. Returns the delivered row's outcome."""
    until = time.monotonic() + budget  # counted from the task's start, as django-q2's timeout
    if budget <= 0 or not usable(connection) or global_cap_binds():
        return relay.execute(event_id, token)
    token = uuid.UUID(str(token))
    event = relay.begin_delivered(event_id, token)
    if event is None:
        return Outcome.DUPLICATE
    first: Outcome | None = None
    with stopping.handling():
        while True:
            link = Link(event.queue, event.aggregate_id, until=until)
            with Heartbeat(event.id, token):
                outcome = relay.run(event, token, finish=link.finish)
            first = first or outcome
            if link.next is None:
                return first
            event, token = link.next
            if stopping.asked():
                _put_back(event, token)
                return first


def global_cap_binds() -> bool:
    """True when ``max_in_flight`` is below the sum of the queues' own limits (point 2)."""
    cap = conf.value("max_in_flight")
    return bool(cap) and cap < sum(conf.in_flight_limit(queue) for queue in registry.queues())


def _put_back(event: OutboxEvent, token: uuid.UUID) -> None:
    """A row claimed just before a SIGTERM, not begun: pending again, due at once, no
    attempt counted (it wakes the pushers of another cluster)."""
    put = relay._finish(
        event.id,
        token,
        OutboxStatus.PENDING,
        claim_token=None,
        lease_expires_at=None,
        started_at=None,
    )
    log.info("outbox #%s: claimed before SIGTERM, put back: %s", event.id, put)
