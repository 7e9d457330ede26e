"""Writes to the outbox from the caller's side: enqueue, wake, retry now."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import Case, CharField, F, Q, Value, When
from django.db.models.functions import Cast, Concat, Now

from core import prepared
from core.counters import counter_add
from outbox import conf, picking, registry
from outbox.counters import RelayStat
from outbox.errors import NotDead, NotRequeuable, NotRetriable, OutboxRowNotFound
from outbox.models import OutboxEvent, OutboxStatus
from outbox.outcomes import Outcome

log = logging.getLogger(__name__)


def outbox_notify(queue: str = "") -> None:
    """Wake the dispatchers (PostgreSQL delivers the NOTIFY when the transaction commits).

    ``queue``, the payload, names the queue that has a row for them: a cluster's pusher
    wakes only for its own queue's and for unaddressed ones (``outbox.broker``); the
    dispatchers, which claim for every queue, wake for all.
    """
    if conf.is_postgres(connection):  # every request sends one: a prepared statement
        prepared.execute(_NOTIFY, {"channel": conf.NOTIFY_CHANNEL, "queue": queue})


_NOTIFY = "SELECT pg_notify(%(channel)s, %(queue)s)"

# "A pending row is due now": the condition of ``outbox_notify_if_due`` (PostgreSQL).
ANY_DUE = (
    f"EXISTS (SELECT 1 FROM {OutboxEvent._meta.db_table} "
    "WHERE status = 'pending' AND available_at <= now())"
)


def outbox_notify_if_due() -> None:
    """Wake the dispatchers only if a pending row is due now (PostgreSQL, at commit).

    A finished row frees an in-flight slot; the wake-up matters only to a row waiting for
    one. When none is due (the common case off a backlog) nobody is woken for nothing; a
    row that becomes due later is found by the dispatcher's poll or its own NOTIFY.
    """
    if conf.is_postgres(connection):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_notify(%s, '') WHERE {ANY_DUE}", [conf.NOTIFY_CHANNEL])


class Enqueued(NamedTuple):
    """One row of ``outbox_enqueue_many``: ``outbox_enqueue``'s arguments but the kind."""

    aggregate_id: str
    payload: dict
    fairness_key: str = ""


def _events(caller: str, kind: str, rows: Iterable[Enqueued]) -> tuple[str, list[OutboxEvent]]:
    """The queue of ``kind`` and its rows to write, unsaved (``caller`` must run inside a
    transaction; a kind no handler runs is a ``ValueError``)."""
    if not connection.in_atomic_block:
        raise RuntimeError(f"{caller}() must run inside transaction.atomic()")
    route = registry.route(kind)
    if route is None:
        raise ValueError(f"no outbox handler registered for {kind!r}")
    events = [
        OutboxEvent(
            kind=kind,
            queue=route.queue,
            aggregate_id=str(row.aggregate_id),
            fairness_key=row.fairness_key[:64],
            payload=row.payload,
            available_at=Now(),  # the database's clock, as every due time (see relay)
        )
        for row in rows
    ]
    return route.queue, events


def outbox_enqueue(
    *, kind: str, aggregate_id: str, payload: dict, fairness_key: str = ""
) -> OutboxEvent:
    """Write one request row. Must run inside the caller's transaction.

    The caller holds the aggregate's row lock, so rows of one aggregate commit in id
    order (the relay's per-aggregate ordering relies on it). Rows with different
    ``fairness_key`` values are served round-robin by key (``relay.claim``).
    """
    queue, [event] = _events(
        "outbox_enqueue", kind, [Enqueued(aggregate_id, payload, fairness_key)]
    )
    prepared.insert(event)  # a prepared statement: every request writes one
    outbox_notify(queue)
    return event


def outbox_enqueue_many(*, kind: str, rows: Iterable[Enqueued]) -> list[OutboxEvent]:
    """``outbox_enqueue`` of many rows of one kind: one round trip and one wake-up. Must run
    inside the caller's transaction, which holds each aggregate's row lock; rows are
    numbered in the order given (so two rows of one aggregate keep their order)."""
    queue, events = _events("outbox_enqueue_many", kind, rows)
    if events:
        prepared.insert_many(events)  # one round trip, a prepared statement
        outbox_notify(queue)
    return events


def outbox_enqueue_once(*, kind: str, aggregate_id: str, payload: dict) -> None:
    """Make a not yet started ``pending`` row of this kind and aggregate due now, or
    write a new one. For requests that say "look again" (idempotent handlers): one
    waiting row serves any number of asks. Must run inside the caller's transaction.

    A row being claimed meanwhile is locked by the claim; the update waits for it, finds
    it no longer pending and writes a new row, so no ask is lost.
    """
    woken = OutboxEvent.objects.filter(
        kind=kind,
        aggregate_id=str(aggregate_id),
        status=OutboxStatus.PENDING,
        started_at__isnull=True,
    ).update(available_at=Now())
    if woken:
        route = registry.route(kind)
        outbox_notify(route.queue if route else "")
        return
    outbox_enqueue(kind=kind, aggregate_id=aggregate_id, payload=payload)


def _row_locked(event_id: int, status: str, refusal: type[Exception]) -> OutboxEvent:
    """The outbox row ``event_id`` under its row lock (in the caller's transaction),
    which must be in ``status``: ``OutboxRowNotFound`` for no such row, ``refusal``
    (with the row's status) for a row in another."""
    event = OutboxEvent.objects.select_for_update().filter(id=event_id).first()
    if event is None:
        raise OutboxRowNotFound(f"no outbox row {event_id}", id=event_id)
    if event.status != status:
        raise refusal(
            f"outbox row #{event_id} is {event.status}, not {status}",
            id=event_id,
            status=event.status,
        )
    return event


def outbox_retry_now(*, event_id: int) -> OutboxEvent:
    """Make a pending row that waits on backoff due now, under its row lock.

    Raises ``OutboxRowNotFound`` for no such row and ``NotRetriable`` for a row in any
    other status (the status never changes here: "retry now" moves ``available_at``).
    Idempotent: a row already due stays due.
    """
    with transaction.atomic():
        event = _row_locked(event_id, OutboxStatus.PENDING, NotRetriable)
        event.available_at = Now()
        event.save(update_fields=["available_at"])
        event.refresh_from_db(fields=["available_at"])
        outbox_notify(event.queue)
    return event


def outbox_make_due(*, aggregate_ids: list[str], queue: str) -> int:
    """Make the pending rows of ``aggregate_ids`` on ``queue`` that wait (on backoff or
    deferred) due now, and wake its workers; returns how many. One statement and a
    NOTIFY; rows a worker holds (``processing``) are not touched. Idempotent."""
    if not aggregate_ids:
        return 0
    with transaction.atomic(savepoint=False):
        made = OutboxEvent.objects.filter(
            status=OutboxStatus.PENDING,
            queue=queue,
            aggregate_id__in=aggregate_ids,
            available_at__gt=Now(),
        ).update(available_at=Now())
        if made:
            outbox_notify(queue)
    return made


def outbox_dead_resolve(*, event_id: int, actor: str) -> OutboxEvent:
    """Mark a dead letter resolved: an operator dismissed it (``outbox_dead_requeue``
    resolves it too, with the new row it writes), so retention may delete it
    ``retention.dead_letters_resolved`` later.

    Under the row's lock: ``OutboxRowNotFound`` for no such row, ``NotDead`` for a row in
    any other status (nothing changes). The status stays ``dead`` (contract §3: a dead
    row never moves). Idempotent: a row already resolved keeps its first resolution.
    """
    with transaction.atomic():
        event = _row_locked(event_id, OutboxStatus.DEAD, NotDead)
        if event.resolved_at is None:
            event.resolved_at = Now()
            event.resolved_by = actor[:150]
            event.save(update_fields=["resolved_at", "resolved_by"])
            event.refresh_from_db(fields=["resolved_at"])
            log.info("outbox: dead row #%s resolved by %s", event_id, actor)
    return event


def outbox_dead_requeue(*, event_id: int, actor: str) -> OutboxEvent:
    """Run a dead letter's request again: a new ``pending`` row with the dead row's kind,
    aggregate, fairness key and payload, due now; the dead row is resolved by it.

    In one transaction, under the dead row's lock:
    1. ``OutboxRowNotFound`` for no such row, ``NotDead`` for a row in any other status,
       ``NotRequeuable`` for a row already resolved (dismissed, or requeued before: its
       request runs once per requeue, never twice from one dead letter) and for a kind
       no handler is registered for any more (nothing changes).
    2. Write the new row (``outbox_enqueue``: a new id, so it runs after every request of
       its aggregate already committed; the outbox holds no lock of the aggregate, so
       one written concurrently may run on either side of it. A handler finds the state
       as it is then, and one whose request no longer applies ends ``superseded``; the
       payload is the same, so a webhook delivery keeps its ``webhook-id``).
    3. Set the dead row's ``resolved_at`` and ``resolved_by``. The status stays ``dead``
       (contract §3), so retention deletes the dead row
       ``retention.dead_letters_resolved`` later, and never the new row, which is an
       ordinary pending row.
    Once per dead row: a second call (or two at once: the lock orders them, and the
    second sees the first's resolution) is refused in step 1. Returns the new row.
    """
    with transaction.atomic():
        event = _row_locked(event_id, OutboxStatus.DEAD, NotDead)
        if event.resolved_at is not None:
            raise NotRequeuable(
                f"outbox row #{event_id} already resolved by {event.resolved_by or 'unknown'}"
                f" at {event.resolved_at.isoformat()}",
                id=event_id,
                resolved_by=event.resolved_by,
                resolved_at=event.resolved_at.isoformat(),
            )
        if registry.route(event.kind) is None:
            raise NotRequeuable(
                f"outbox row #{event_id}: no handler runs {event.kind} any more",
                id=event_id,
                kind=event.kind,
            )
        again = outbox_enqueue(
            kind=event.kind,
            aggregate_id=event.aggregate_id,
            payload=event.payload,
            fairness_key=event.fairness_key,
        )
        event.resolved_at = Now()
        event.resolved_by = actor[:150]
        event.save(update_fields=["resolved_at", "resolved_by"])
        log.info("outbox: dead row #%s requeued as #%s by %s", event_id, again.id, actor)
    return OutboxEvent.objects.get(id=again.id)


def _deferred(*, queue: str):
    """The rows deferred on ``queue`` (waiting for a slot), made due now.

    Locked in id order and skipping rows another transaction holds: two releases at
    once (two slots freed together) scanned the rows in different orders and deadlocked;
    a row skipped here is being released (or worked on) by its holder, and the
    dispatcher's poll is the safety net."""
    waiting = OutboxEvent.objects.filter(
        status=OutboxStatus.PENDING,
        queue=queue,
        outcome=Outcome.DEFERRED,
        available_at__gt=Now(),
    )
    mine = waiting.order_by("pk").select_for_update(skip_locked=True).values("pk")
    return OutboxEvent.objects.filter(pk__in=mine), {"available_at": Now()}


def outbox_release_deferred(*, queue: str) -> int:
    """A capacity slot freed: make the rows deferred on ``queue`` due now, and wake.

    Runs on every exit from a slot (each create or start that settles): on PostgreSQL one
    statement (the compiled release and its NOTIFY, ``core.prepared.update_rows``), in
    the caller's transaction or one of its own (its row locks need one: a retry releases
    outside any).
    """
    with transaction.atomic(savepoint=False):
        return prepared.update_rows(
            "outbox.release_deferred", _deferred, queue=queue, notify=(conf.NOTIFY_CHANNEL, queue)
        )


def outbox_park(*, ids: list[int], delay: float) -> int:
    """Rows a claim guard held back that cannot go until something frees room (a create
    whose every engine is full): due again after ``delay`` seconds, marked deferred, so
    ``outbox_release_deferred`` makes them due at once when room frees, and the claims
    meanwhile pass over them instead of selecting them on every poll (where they would
    fill the claim's window and starve the rows behind them).

    1. A ``pending`` row keeps its status: no attempt is counted and the fairness turn is
       kept (contract §3: as a deferral, without a claim).
    2. A ``processing`` row whose lease ran out (its worker died, or its cluster never
       began it) goes back to ``pending`` (contract §3: processing → pending, deferred),
       its claim cleared; what its lapsed claim was is counted as a reclaim would have
       counted it (``outbox.picking.TAKE``): an attempt, with ``CRASHED`` as its last
       error, for one whose handler had begun; a reclaim, with the reason, for one no
       worker began (and the ``reclaimed_unstarted`` counter, and a warning, as a claim
       does). A row under a live lease is left alone.
    For a guard, in the claim's transaction, which holds the rows' locks. Returns how many
    rows it parked.
    """
    if not ids:
        return 0
    due = Now() + dt.timedelta(seconds=delay)
    parked = OutboxEvent.objects.filter(pk__in=ids, status=OutboxStatus.PENDING).update(
        available_at=due, outcome=Outcome.DEFERRED
    )
    begun = Q(started_at__isnull=False)
    # ``Now()`` is ``STATEMENT_TIMESTAMP()`` on PostgreSQL (Django 5), not the transaction's
    # start: the pick's clock, read later, so a row the pick found lapsed is lapsed here.
    lapsed = OutboxEvent.objects.filter(
        pk__in=ids, status=OutboxStatus.PROCESSING, lease_expires_at__lt=Now()
    )
    seen = list(lapsed.values_list("pk", "started_at"))  # rare: a worker died
    if not seen:
        return parked
    # Every right-hand side reads the row as it was (one UPDATE): ``started_at`` before
    # it is cleared.
    moved = lapsed.move_to(
        OutboxStatus.PENDING,
        available_at=due,
        outcome=Outcome.DEFERRED,
        claim_token=None,
        lease_expires_at=None,
        started_at=None,
        attempts=F("attempts") + Case(When(begun, then=1), default=0),
        reclaims=F("reclaims") + Case(When(begun, then=0), default=1),
        last_error=Case(
            When(begun, then=Value(picking.CRASHED)),
            default=Concat(
                Value("claimed "),
                Cast(F("reclaims") + 1, CharField()),
                Value(picking.UNSTARTED),
            ),
            output_field=CharField(),
        ),
    )
    unbegun = [pk for pk, started in seen if started is None]
    counter_add(RelayStat.RECLAIMED_UNSTARTED, len(unbegun))
    log.warning(
        "outbox: rows %s parked after their claim ran out (%s never begun by a worker)",
        [pk for pk, _ in seen],
        len(unbegun),
    )
    return parked + moved


def outbox_supersede_waiting(*, aggregate_id: str, reason: str) -> int:
    """Finish the waiting (``pending``) rows of ``aggregate_id`` as superseded, at once,
    for a caller whose aggregate is gone for good (an instance forgotten with its
    decommissioned engine). Returns how many rows it finished.

    Each row goes the way the state machine allows (contract §3): claimed under a fresh
    token, then ``sent`` with the outcome ``superseded`` and ``reason`` on ``last_error``,
    two compare-and-sets in the caller's transaction (or one of its own); no handler runs.
    A row another transaction holds (a claim in progress) is skipped, as is a row in
    ``processing``: its handler re-reads the aggregate, finds it gone and finishes it as
    superseded itself. Idempotent.
    """
    with transaction.atomic(savepoint=False):
        waiting = (
            OutboxEvent.objects.filter(aggregate_id=str(aggregate_id), status=OutboxStatus.PENDING)
            .order_by("pk")
            .select_for_update(skip_locked=True)
        )
        ids = list(waiting.values_list("pk", flat=True))
        if not ids:
            return 0
        token = uuid.uuid4()
        OutboxEvent.objects.filter(pk__in=ids).move_to(
            OutboxStatus.PROCESSING, claim_token=token, lease_expires_at=Now()
        )
        done = OutboxEvent.objects.filter(pk__in=ids, claim_token=token).move_to(
            OutboxStatus.SENT,
            outcome=Outcome.SUPERSEDED,
            sent_at=Now(),
            lease_expires_at=None,
            last_error=reason[:8000],
        )
    counter_add(RelayStat.SUPERSEDED, done)
    log.info("outbox: %s waiting rows of %s superseded: %s", done, aggregate_id, reason)
    return done
