"""The relay's state machine for one outbox row: claim, start, outcome (contract §3).

Every time a lease or a due time is set or compared, it is the database's clock
(``Now()``), never a host's: a dispatcher and a worker on hosts whose clocks disagree
still agree on when a lease runs out.

Every write here is a compare-and-set on the row's claim token, so a worker whose claim
expired (and was handed to someone else) changes nothing. Every status write is
``OutboxQuerySet.move_to``: one UPDATE whose WHERE also requires a status from which the
state machine (``outbox.models.TRANSITIONS``) allows the move. Nothing here holds a
transaction open across a handler.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import random
import time
import traceback
import uuid
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.db.models import CharField, Exists, F, Max, OuterRef, Value
from django.db.models.functions import Cast, Concat, Now
from django.utils import timezone

from core import prepared
from core.batches import delete_in_batches
from core.counters import counter_add
from core.retention import retention_age
from outbox import conf, hooks, picking, registry, stopping
from outbox.counters import RelayStat
from outbox.heartbeat import Heartbeat
from outbox.models import UNFINISHED, FairnessMark, OutboxEvent, OutboxStatus
from outbox.outcomes import HANDLER_OUTCOMES, Outcome
from outbox.registry import Defer, PermanentFailure, Retry, RetryLater
from outbox.services import (
    ANY_DUE,
    outbox_notify,
    outbox_notify_if_due,
    outbox_release_deferred,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


def backoff(attempts: int) -> float:
    """Seconds before retry number ``attempts``: exponential, capped, spread by up to +50%."""
    base = min(conf.value("backoff_cap"), conf.value("backoff_base") * 2 ** max(0, attempts - 1))
    return base * (1 + random.uniform(0, 0.5))


def _unblocked(rows):
    """``rows`` without those that have an older unfinished row of the same aggregate."""
    older_unfinished = OutboxEvent.objects.filter(
        aggregate_id=OuterRef("aggregate_id"), id__lt=OuterRef("id"), status__in=UNFINISHED
    )
    return rows.filter(~Exists(older_unfinished))


def _expired(queue: str):
    """``processing`` rows whose lease ran out (their worker died), oldest first."""
    rows = OutboxEvent.objects.filter(
        queue=queue, status=OutboxStatus.PROCESSING, lease_expires_at__lt=Now()
    )
    return _unblocked(rows).order_by("id")


def _pending_due(queue: str):
    return OutboxEvent.objects.filter(
        queue=queue, status=OutboxStatus.PENDING, available_at__lte=Now()
    )


ROW_FIELDS = ("id", "status", "started_at", "fairness_key", "aggregate_id")


def _pick(queue: str, limit: int) -> tuple[list[tuple], dict[str, int], int]:
    """Steps 1 to 3 of ``claim``: the rows (``ROW_FIELDS``, locked, in claim order), the
    turns of their keys and the queue's last turn. On PostgreSQL one round trip of
    prepared SQL (``outbox.picking``); on SQLite, under its IMMEDIATE write lock, the
    same steps through the ORM."""
    if conf.is_postgres(connection):
        return picking.pick(
            queue, limit, queue_limit=conf.in_flight_limit(queue), cap=conf.value("max_in_flight")
        )
    live = OutboxEvent.objects.filter(status=OutboxStatus.PROCESSING, lease_expires_at__gte=Now())
    room = min(limit, conf.in_flight_limit(queue) - live.filter(queue=queue).count())
    cap = conf.value("max_in_flight")
    if cap and room > 0:
        room = min(room, cap - live.count())
    if room <= 0:
        return [], {}, 0
    rows = list(_expired(queue).values_list(*ROW_FIELDS)[:room])
    due = _pending_due(queue).order_by("fairness_key").values_list("fairness_key", flat=True)
    keys = list(due.distinct())
    marks = FairnessMark.objects.filter(queue=queue)
    turns = dict(marks.filter(key__in=keys).values_list("key", "turn"))
    if len(rows) < room:
        rows += _fair_pending(queue, room - len(rows), keys, turns)
    return rows, turns, marks.aggregate(turn=Max("turn"))["turn"] or 0


def _fair_pending(
    queue: str, room: int, keys: list[str], turns: dict[str, int]
) -> list[tuple[int, str, object, str]]:
    """Up to ``room`` due pending rows, round-robin over their fairness keys (contract §8),
    as ``outbox.picking.PICK`` selects them on PostgreSQL.

    1. Order the keys that have due pending rows (``keys``) by their last turn (``turns``:
       a key never served first, then the one served least recently; ties by key).
    2. Take each key's oldest unblocked rows, up to ``room`` a key.
    3. Interleave them (every key's first row, then every key's second...), cut at room.
    """
    keys = sorted(keys, key=lambda key: (turns.get(key, 0), key))
    picked = [
        list(
            _unblocked(_pending_due(queue).filter(fairness_key=key))
            .order_by("id")
            .values_list(*ROW_FIELDS)[:room]
        )
        for key in keys
    ]
    rounds = itertools.zip_longest(*picked)
    return list(itertools.islice((row for layer in rounds for row in layer if row), room))


def _mark_served(queue: str, keys: list[str], had: dict[str, int], last: int) -> None:
    """Give the keys just served the next turns, in the order they were served.

    Only the order of the turns matters (``_fair_pending`` sorts by it), so nothing is
    written when the served keys already hold the last turns of the queue in that order
    (one owner draining a backlog alone: every claim would rewrite its mark for nothing).
    """
    turns = {key: last + index for index, key in enumerate(keys, start=1)}
    served = sorted(turns, key=turns.get)
    if [had.get(key) for key in served] == list(range(last - len(served) + 1, last + 1)):
        return
    if conf.is_postgres(connection):
        picking.mark(queue, turns)
        return
    now = timezone.now()
    FairnessMark.objects.bulk_create(
        [
            FairnessMark(queue=queue, key=key, turn=turn, served_at=now)
            for key, turn in turns.items()
        ],
        update_conflicts=True,
        unique_fields=["queue", "key"],
        update_fields=["turn", "served_at"],
    )


def _guarded(queue: str, rows: list[tuple]) -> list[tuple]:
    """``rows`` less those the queue's claim guard holds back (``registry.claim_guard``).

    A row held back is left as it was (``pending``, or ``processing`` under a lease that
    ran out), still due: no attempt or reclaim counted, its key keeps its turn, and the
    rows behind it of its aggregate stay behind it. A guard may instead park the rows
    that cannot go until room frees (``services.outbox_park``: ``pending`` and deferred,
    a lapsed claim counted as a reclaim counts it), so that they stop filling the claim's
    window on every poll.
    """
    guard = registry.claim_guard(queue)
    if guard is None or not rows:
        return rows
    allowed = set(guard([(row[0], row[4]) for row in rows]))
    return [row for row in rows if row[0] in allowed]


def claim(queue: str, limit: int) -> list[tuple[int, uuid.UUID]]:
    """Claim up to ``limit`` due rows of ``queue``; return ``(id, claim token)`` pairs.

    1. Serialize claimers (an advisory lock on PostgreSQL, the IMMEDIATE write lock on
       SQLite) so that the in-flight counts below are exact.
    2. Room = the queue's in-flight limit minus its live ``processing`` rows, and no more
       than ``max_in_flight`` minus the live rows of every queue.
    3. Select due rows that have no older unfinished row of the same aggregate,
       ``FOR UPDATE SKIP LOCKED``: first ``processing`` rows whose lease expired (oldest
       first), then due ``pending`` rows round-robin by fairness key (every key's oldest
       row in turn order, then every key's next: ``_fair_pending``), whose keys get the
       next turns (``FairnessMark``), in this transaction. Steps 1 to 3 are ``_pick``:
       on PostgreSQL the prepared statements of ``outbox.picking``.
    4. Ask the queue's claim guard, if it has one (``_guarded``), which of them it may
       take now; only the pending rows taken get turns.
    5. Mark them ``processing`` under a fresh token and a lease. A row reclaimed after
       it had started (its worker died) counts an attempt; one reclaimed before any
       worker began it (handed to a cluster that took no tasks) counts a reclaim, with
       the reason on the row, so it never loops silently (on PostgreSQL one statement,
       ``picking.TAKE``).
    Runs in its own transaction, or as part of the caller's (no savepoint: an error
    rolls the caller's back too); the caller hands the rows to workers.
    """
    with transaction.atomic(savepoint=False):
        rows, turns, last = _pick(queue, limit)
        rows = _guarded(queue, rows)
        served = [row[3] for row in rows if row[1] == OutboxStatus.PENDING]
        if served:
            _mark_served(queue, served, turns, last)
        if not rows:
            return []
        token = uuid.uuid4()
        crashed = [row[0] for row in rows if row[1] == "processing" and row[2]]
        unstarted = [row[0] for row in rows if row[1] == "processing" and not row[2]]
        if conf.is_postgres(connection):  # the move and both counts in one statement
            picking.take([row[0] for row in rows], token, conf.claim_lease(queue))
        else:
            OutboxEvent.objects.filter(id__in=[row[0] for row in rows]).move_to(
                OutboxStatus.PROCESSING,
                claim_token=token,
                lease_expires_at=Now() + conf.claim_lease(queue),
                started_at=None,
            )
            _count_crashes(crashed)
            _count_unstarted(unstarted)
    log_reclaims(crashed, unstarted)
    counter_add(RelayStat.CLAIMED, len(rows))
    counter_add(RelayStat.RECLAIMED_UNSTARTED, len(unstarted))
    return [(row[0], token) for row in rows]


def log_reclaims(crashed: list[int], unstarted: list[int]) -> None:
    for row_id in crashed:
        log.warning("outbox #%s: lease expired mid-run; reclaimed", row_id)
    for row_id in unstarted:
        log.warning("outbox #%s: claim ran out before any worker began it; reclaimed", row_id)


def _count_crashes(ids: list[int]) -> None:
    """A reclaim of rows whose handler had begun counts an attempt (``outbox.picking``
    counts it in its ``TAKE`` on PostgreSQL)."""
    if ids:
        OutboxEvent.objects.filter(id__in=ids).update(
            attempts=F("attempts") + 1, last_error=picking.CRASHED
        )


def _count_unstarted(ids: list[int]) -> None:
    """A reclaim of rows no worker had begun counts a reclaim (as ``_count_crashes``)."""
    if ids:
        OutboxEvent.objects.filter(id__in=ids).update(
            reclaims=F("reclaims") + 1,
            last_error=Concat(
                Value("claimed "), Cast(F("reclaims") + 1, CharField()), Value(picking.UNSTARTED)
            ),
        )


def claims_release_unstarted(queue: str) -> int:
    """Make ``queue``'s live claims that no worker has begun due at once.

    For a cluster that was just killed (its in-memory task queue went with it): its
    claims go to the new cluster now, not when their lease runs out. A compare-and-set
    on ``started_at IS NULL``: a claim a worker began keeps its lease. A late delivery
    of a released claim is refused by ``begin()`` (its lease ran out; its token is
    replaced when it is reclaimed, which counts a reclaim).
    """
    released = OutboxEvent.objects.filter(
        queue=queue,
        status=OutboxStatus.PROCESSING,
        started_at__isnull=True,
        lease_expires_at__gt=Now(),
    ).update(lease_expires_at=Now() - dt.timedelta(seconds=1))
    if released:
        outbox_notify(queue)
    return released


def _begun(*, id: int, token: uuid.UUID, lease: dt.timedelta):
    """``begin``'s compare-and-set: the row's claim, not begun, its lease still running."""
    rows = OutboxEvent.objects.filter(
        id=id,
        claim_token=token,
        status=OutboxStatus.PROCESSING,
        started_at__isnull=True,
        lease_expires_at__gt=Now(),
    )
    return rows, {"started_at": Now(), "lease_expires_at": Now() + lease}


def begin(event_id: int, token: uuid.UUID | str) -> OutboxEvent | None:
    """Compare-and-set ``started_at`` for this claim; the row, or None for a duplicate
    delivery (or a claim whose lease ran out).

    Also restarts the lease from now at ``liveness_timeout``, which the worker's
    heartbeat renews (``outbox.heartbeat``) up to a full ``delivery_timeout`` plus margin
    however long the row waited in the worker queue. On PostgreSQL one statement (a
    queryset's update compiled once, returning the row: ``core.prepared.update_returning``).
    """
    # A token as a task's args carry it (a string) is made a uuid first: the statement is
    # compiled once, with a stand-in of the first call's type.
    token = uuid.UUID(str(token))
    return prepared.update_returning(
        "relay.begin", _begun, id=event_id, token=token, lease=conf.started_lease()
    )


WRITE_TRIES = 3


def _write_pause(attempt: int) -> None:
    """Between two tries of an outcome write (a seam for tests)."""
    time.sleep(min(2.0, 0.25 * 2**attempt))


def _outcome_write(write: Callable[[], T], *, event_id: int, limited: bool = False) -> T | None:
    """Run one outcome write, a transaction of its own, so that it finishes.

    1. Each try is one transaction that first sets PostgreSQL's ``statement_timeout`` to
       ``outbox.write_timeout`` for itself only (``SET LOCAL``): a write stuck on a lock
       or a stalled server is cancelled, never left hanging. The claim's advisory lock
       and the admission gate run in other transactions and keep waiting as they must.
       (``limited``: ``write`` is one statement that sets it itself, ``_finish_sql``.)
    2. A try that is cancelled or loses its connection is retried after a pause, up to
       ``WRITE_TRIES`` times. If none lands, None: the outcome is left to the lease (the
       row is due again when it runs out, and the handler is idempotent).
    """
    for attempt in range(1, WRITE_TRIES + 1):
        try:
            if limited:
                return write()
            with transaction.atomic():
                conf.limit_statements(connection)
                return write()
        except DatabaseError as exc:
            log.warning(
                "outbox #%s: outcome write %s/%s failed: %s", event_id, attempt, WRITE_TRIES, exc
            )
            if not connection.in_atomic_block and not connection.is_usable():
                connection.close()
            if attempt < WRITE_TRIES:
                _write_pause(attempt)
    log.error("outbox #%s: outcome not recorded; the row is left to its lease", event_id)
    return None


def _finish_in_txn(event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
    """Move the row to ``target`` with ``fields``, only while the claim is still ours (a
    compare-and-set on the token and on the sources the state machine allows), and wake
    the dispatchers if a row waits for the slot this frees. Runs inside the caller's
    transaction.

    Without the wake-up a backlog would move one batch per ``poll_interval``.
    """
    finished = (
        OutboxEvent.objects.filter(id=event_id, claim_token=token).move_to(target, **fields) == 1
    )
    if finished:
        outbox_notify_if_due()
    return finished


def _one_trip(connection) -> bool:
    """Whether ``_finish_sql`` can run here: PostgreSQL with client-side binding (Django's
    default: several statements in one query), and no transaction of the caller's."""
    return (
        conf.is_postgres(connection)
        and not connection.in_atomic_block
        and not connection.settings_dict["OPTIONS"].get("server_side_binding")
    )


def _finish_sql(event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
    """``_finish_in_txn`` and its ``statement_timeout`` in one round trip, one commit.

    One query of two statements, which PostgreSQL runs as one implicit transaction:
    ``SET LOCAL statement_timeout`` (ends with it), then the compare-and-set (``move_to``'s
    own UPDATE) in a CTE whose result decides the NOTIFY (``ANY_DUE``, as
    ``outbox_notify_if_due``). A cancelled or failed statement rolls it all back.
    """
    update, params = OutboxEvent.objects.filter(id=event_id, claim_token=token).move_to_sql(
        target, connection, **fields
    )
    timeout = int(conf.value("write_timeout") * 1000)
    sql = (
        f"SET LOCAL statement_timeout = {timeout}; "
        f"WITH moved AS ({update} RETURNING 1), "
        f"woke AS (SELECT pg_notify(%s, '') WHERE EXISTS (SELECT 1 FROM moved) AND {ANY_DUE}) "
        "SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM woke)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, (*params, conf.NOTIFY_CHANNEL))
        cursor.nextset()  # past the SET
        moved, _woke = cursor.fetchone()
    return moved == 1


def _finish(event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
    """``_finish_in_txn`` as an outcome write of its own (``_outcome_write``): on
    PostgreSQL one round trip (``_finish_sql``)."""
    if _one_trip(connection):
        write = lambda: _finish_sql(event_id, token, target, **fields)  # noqa: E731
        return bool(_outcome_write(write, event_id=event_id, limited=True))
    return bool(
        _outcome_write(lambda: _finish_in_txn(event_id, token, target, **fields), event_id=event_id)
    )


def execute(event_id: int, token: uuid.UUID | str) -> Outcome:
    """Run the handler for one claimed row and record its outcome. Never raises.

    While the handler runs and its outcome is written, a heartbeat keeps the claim
    alive (``outbox.heartbeat``); if this process dies, the row is due again within
    ``liveness_timeout``. Returns what happened: ``duplicate``, ``sent``, ``superseded``,
    ``deferred``, ``retried``, ``dead`` or ``stale`` (the claim was lost before the outcome).
    A django-q2 worker runs ``outbox.chain.execute`` instead, which goes on with the
    rows it claims in the outcome's transaction.
    """
    token = uuid.UUID(str(token))
    event = begin_delivered(event_id, token)
    if event is None:
        return Outcome.DUPLICATE
    with stopping.handling(), Heartbeat(event_id, token):
        return run(event, token)


def begin_delivered(event_id: int, token: uuid.UUID) -> OutboxEvent | None:
    """``begin()`` for a delivered claim, once more on a fresh connection if the first
    try finds the connection dead; None (logged) for a duplicate or expired delivery."""
    try:
        event = begin(event_id, token)
    except (InterfaceError, OperationalError):
        # The connection died since the last task (workers skip health checks,
        # ``forking.health_checks_off``): once more on a fresh one. A begin that did
        # commit before the cut reads as a duplicate; the short lease then frees the row.
        connection.close()
        event = begin(event_id, token)
    if event is None:
        log.info("outbox #%s: duplicate or expired delivery of claim %s ignored", event_id, token)
    return event


# How a success is recorded: ``_finish``'s signature. ``outbox.chain`` passes its own,
# which also claims the worker's next row in the same transaction.
Finish = Callable[..., bool]


def run(event: OutboxEvent, token: uuid.UUID, *, finish: Finish | None = None) -> Outcome:
    """Run the handler of a begun claim and record its outcome (``finish`` records a
    success, ``sent`` or ``superseded``; default ``_finish``). Never raises."""
    route = registry.route(event.kind)
    try:
        if route is None:
            raise PermanentFailure(f"no handler registered for {event.kind}")
        if event.attempts >= conf.value("max_attempts"):
            # The whole story stays the row's last error; the hook gets the last line.
            raise PermanentFailure(
                f"{event.last_error}\ngave up after {event.attempts} attempts:"
                f" {_last_line(event.last_error)}"
            )
        outcome = route.handler(event)
    except Defer as exc:
        log.debug("outbox #%s deferred: %s", event.id, exc)
        return _record(event, token, Outcome.DEFERRED, delay=exc.delay)
    except PermanentFailure as exc:
        return _dead(event, token, route, str(exc))
    except Exception as exc:  # noqa: BLE001 - any handler error is a retriable failure
        detail = "".join(traceback.format_exception(exc))
        hooks.emit("error", event=event, error=detail)
        if isinstance(exc, RetryLater):  # a reason in a person's words (outbox.registry)
            return _retry(event, token, route, detail, exc.retry_after, _last_line(str(exc)))
        return _retry(event, token, route, detail, 0.0, _last_line(detail))
    if outcome not in HANDLER_OUTCOMES:
        return _dead(event, token, route, f"handler returned {outcome!r}, not sent or superseded")
    return _record(event, token, Outcome(outcome), finish=finish or _finish)


def _record(
    event: OutboxEvent,
    token: uuid.UUID,
    outcome: Outcome,
    *,
    delay: float = 0,
    finish: Finish = _finish,
) -> Outcome:
    if outcome == Outcome.DEFERRED:
        target = OutboxStatus.PENDING
        wait = max(float(conf.value("poll_interval")), delay)
        fields = dict(
            available_at=Now() + dt.timedelta(seconds=wait),
            claim_token=None,
            lease_expires_at=None,
            started_at=None,
            outcome=Outcome.DEFERRED,
        )
    else:
        target = OutboxStatus.SENT
        fields = dict(sent_at=Now(), outcome=outcome, lease_expires_at=None)
    if not finish(event.id, token, target, **fields):
        return Outcome.STALE
    counter_add(RelayStat(outcome))
    if outcome == Outcome.SUPERSEDED:
        log.info("outbox #%s %s for %s superseded", event.id, event.kind, event.aggregate_id)
    return outcome


def _retry(event, token, route, detail: str, retry_after: float, reason: str) -> Outcome:
    """Record a retriable failure: ``pending`` again after the backoff (``retry_after`` its
    floor), ``attempts + 1``, the traceback kept (``detail``); dead instead when that makes
    ``max_attempts``. The kind's ``on_retry`` hook, if any, is told the schedule and the
    ``reason`` in the same transaction (on PostgreSQL without a hook: one round trip)."""
    attempts = event.attempts + 1
    max_attempts = conf.value("max_attempts")
    if attempts >= max_attempts:
        gave_up = f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}: {reason}"
        return _dead(event, token, route, detail, attempts=attempts, reason=gave_up)
    delay = max(backoff(attempts), retry_after)
    fields = dict(
        attempts=attempts,
        available_at=Now() + dt.timedelta(seconds=delay),
        last_error=detail[-8000:],
        claim_token=None,
        lease_expires_at=None,
        started_at=None,
        outcome=Outcome.RETRIED,
    )
    hook = route.on_retry if route is not None else None
    if hook is None:
        finished = _finish(event.id, token, OutboxStatus.PENDING, **fields)
    else:
        retry = Retry(attempts=attempts, max_attempts=max_attempts, delay=delay, reason=reason)

        def write() -> bool:
            if not _finish_in_txn(event.id, token, OutboxStatus.PENDING, **fields):
                return False
            hook(event, retry)
            return True

        finished = bool(_outcome_write(write, event_id=event.id))
    if not finished:
        return Outcome.STALE
    # Waiting for its retry, the row holds no capacity (contract §4): what was deferred on
    # its queue may go now.
    outbox_release_deferred(queue=event.queue)
    counter_add(RelayStat.RETRIED)
    hooks.emit("retry", event=event, attempts=attempts, delay=delay, error=detail)
    return Outcome.RETRIED


def _dead(
    event, token, route, detail: str, attempts: int | None = None, reason: str | None = None
) -> Outcome:
    """Record the row ``dead`` with ``detail`` (kept whole as its last error) and run the
    kind's ``on_dead`` hook in the same transaction with ``reason`` (default: the last
    line of ``detail``)."""

    def write() -> bool:
        if not _finish_in_txn(
            event.id,
            token,
            OutboxStatus.DEAD,
            attempts=attempts if attempts is not None else event.attempts + 1,
            last_error=detail[-8000:],
            lease_expires_at=None,
            outcome=Outcome.DEAD,
        ):
            return False
        if route is not None and route.on_dead is not None:
            route.on_dead(event, reason if reason is not None else _last_line(detail))
        return True

    if not _outcome_write(write, event_id=event.id):
        return Outcome.STALE
    counter_add(RelayStat.DEAD)
    hooks.emit("dead", event=event, error=detail)
    return Outcome.DEAD


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text


def purge_sent(older_than: dt.timedelta | None = None, *, chunk: int = 5000) -> int:
    """Delete ``sent`` rows older than ``retention``; returns how many went.

    In chunks of ``chunk`` rows, each its own short transaction (``core.batches``): a
    first purge of millions of rows never holds one long transaction (which would stall
    vacuum and slow every claim meanwhile). Registered with ``core.retention``.
    """
    age = older_than or dt.timedelta(seconds=conf.value("retention"))
    old = OutboxEvent.objects.filter(status=OutboxStatus.SENT, sent_at__lt=Now() - age)
    return delete_in_batches(old, batch=chunk)


def purge_resolved_dead(older_than: dt.timedelta | None = None, *, chunk: int = 1000) -> int:
    """Delete dead letters an operator resolved (``resolved_at``) more than
    ``retention.dead_letters_resolved`` ago, in chunks; unresolved ones always stay.
    Reads only dead rows (the ``outbox_dead`` partial index)."""
    age = older_than or retention_age("dead_letters_resolved")
    if age is None:
        return 0
    old = OutboxEvent.objects.filter(status=OutboxStatus.DEAD, resolved_at__lt=Now() - age)
    return delete_in_batches(old, batch=chunk)
