"""A claim and its start: ``claim`` (the claim guard asked, reclaims counted and logged),
the release of claims no worker began, and ``begin`` (the compare-and-set of
``started_at``), as a delivered task calls it (``begin_delivered``)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import CharField, F, Value
from django.db.models.functions import Cast, Concat, Now

from core import prepared
from core.counters import counter_add
from outbox import conf, picking, registry
from outbox.counters import RelayStat
from outbox.models import OutboxEvent, OutboxStatus
from outbox.relay.picks import _mark_served, _pick
from outbox.services import outbox_notify

log = logging.getLogger(__name__)


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
