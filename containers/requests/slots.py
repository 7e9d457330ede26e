"""What a create/start slot is (contract §4), defined once.

The capacity gate, the relay's claim guard for the create queue, the reconciler's
``start_timeout``, the queue stats and the tests' samplers all count slots here, so they
cannot disagree.

An instance holds a slot while it is ``creating`` or ``starting`` and its request row is
in flight: ``processing`` under a live lease (claimed, whether or not a worker has begun
it), or finished while the instance has not settled yet (the worker returned; the
instance reaches ``running``, ``failed`` or ``stopped`` by the events or the reconciler).
It holds none once the engine, having accepted it, made it wait for room of its own (a
Kubernetes Pod waiting for a node: ``engine_waiting_since``), nor after the engine found
it room (``engine_placed_at``) until its next transition: taking a slot then would pass
no gate. It holds none while its
request waits: ``pending`` (a retry's backoff, a deferral, a claim
held back), or ``processing`` under a lease that ran out (its worker died; the row is due
again). So the count never passes ``create_queue_max_concurrency``, because every way into
a slot takes the capacity gate and counts the others first:

1. a fresh create or start (instance ``pending``/``stopped``) moves into ``creating``/
   ``starting`` in its handler, under the gate (``lifecycle.capacity_available``;
   a create's ``placing.create_admit``);
2. a waiting request of an instance already ``creating``/``starting`` becomes a slot the
   moment the relay claims its row: the create queue's claim guard
   (``lifecycle.claims_within_capacity``) lets the claim take only as many as there is
   room, under the gate, and holds the rest back (still ``pending``, no attempt counted).

Every time compared here is on the database's clock (``Now()``), as the leases are.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.db import connection
from django.db.models import (
    BooleanField,
    CharField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Now, Replace

from containers.models import ContainerInstance
from containers.states import ACTIVE_SLOTS, PLACE_FREE
from containers.tallies import instance_counts
from core import prepared
from outbox.models import OutboxEvent, OutboxStatus

# A request that waits holds no slot: its retry's backoff, a deferral, a dead worker's row.
WAITING = Q(status=OutboxStatus.PENDING) | Q(
    status=OutboxStatus.PROCESSING, lease_expires_at__lte=Now()
)


def _waiting_rows():
    """The waiting request rows of the outer query's instance (``OuterRef("id")``)."""
    if connection.vendor == "postgresql":  # uuid::varchar is the hyphenated form we store
        return OutboxEvent.objects.filter(WAITING, aggregate_id=Cast(OuterRef("id"), CharField()))
    # SQLite keeps a UUIDField as 32 hex digits.
    rows = OutboxEvent.objects.annotate(key=Replace(F("aggregate_id"), Value("-"), Value("")))
    return rows.filter(WAITING, key=OuterRef("id"))


def _holds_slot() -> Q:
    """An instance that holds a slot (the one definition; see the module docstring)."""
    # One the engine accepted and made wait for room of its own holds none (section 9),
    # also once placed, until its next transition clears ``engine_waiting_since``.
    return Q(status__in=ACTIVE_SLOTS, engine_waiting_since__isnull=True) & ~Exists(_waiting_rows())


def _holding(*, exclude: uuid.UUID | str | None = None):
    """The instances that hold a slot (``_holds_slot``)."""
    active = ContainerInstance.objects.all()
    if exclude is not None:
        active = active.exclude(id=exclude)
    return active.filter(_holds_slot())


def slot_count(*, exclude: uuid.UUID | str | None = None) -> int:
    """How many instances hold a slot now (``exclude``: leave one instance out).

    One statement, so one snapshot: a sampler never sees an instance that settled beside
    a request claimed after it settled. Reads only; the gate and the claim guard call it
    with the capacity lock held, so their count is exact. On PostgreSQL a prepared
    statement compiled once from ``_holding`` (``core.prepared.count``).
    """
    if exclude is None:
        return prepared.count(("slot_count",), _holding)
    excluded = uuid.UUID(str(exclude))
    return prepared.count(("slot_count", "excluding"), _holding, exclude=excluded)


@dataclass(frozen=True)
class SlotHold:
    """One instance's slot as its request row shows it (see ``slot_hold``)."""

    held: bool  # the instance holds a slot now
    leased: bool  # a worker holds its request under a live lease
    waiting: bool  # its request waits for a retry (or a reclaim)
    seconds: float | None  # slot-holding time of the current attempt, on the DB clock


def slot_hold(*, instance_id: uuid.UUID | str) -> SlotHold:
    """Where the instance's slot stands, judged from its latest request row.

    The slot-holding time is counted from the ``started_at`` of the attempt that holds
    it (set by the relay on the database's clock when the handler began), so waits for
    a retry never count. An instance with no request row (rows are purged after
    ``retention``) counts from its last status change. Reads only.
    """
    row = (
        OutboxEvent.objects.filter(aggregate_id=str(instance_id))
        .order_by("-id")
        .annotate(
            live=ExpressionWrapper(
                Q(status=OutboxStatus.PROCESSING, lease_expires_at__gt=Now()),
                output_field=BooleanField(),
            ),
            age=ExpressionWrapper(Now() - F("started_at"), output_field=DurationField()),
        )
        .values("status", "live", "age")
        .first()
    )
    if row is None:
        age = (
            ContainerInstance.objects.filter(id=instance_id, status__in=ACTIVE_SLOTS)
            .annotate(
                age=ExpressionWrapper(Now() - F("status_changed_at"), output_field=DurationField())
            )
            .values_list("age", flat=True)
            .first()
        )
        return SlotHold(held=age is not None, leased=False, waiting=False, seconds=_secs(age))
    waiting = row["status"] == OutboxStatus.PENDING or (
        row["status"] == OutboxStatus.PROCESSING and not row["live"]
    )
    return SlotHold(
        held=not waiting,
        leased=bool(row["live"]),
        waiting=waiting,
        seconds=None if waiting else _secs(row["age"]),
    )


def _secs(value: dt.timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def slots_by_runtime() -> dict[int | None, int]:
    """``{runtime_id: slots held}`` in one grouped statement (runtimes holding none are
    absent; None: instances in a slot with no engine, if any). Reads only; the same
    definition as ``slot_count``, so its values sum to ``slot_count()`` in the same
    snapshot. Every placement among several engines asks, inside the capacity gate: a
    prepared statement on PostgreSQL, compiled once (``core.prepared.rows``; the ORM's
    compilation alone took 12 ms of a busy core, ``docs/benchmarks.md`` section 12)."""
    return dict(prepared.rows(("slots_by_runtime",), _slots_grouped))


def _slots_grouped():
    """``slots_by_runtime``'s grouped query."""
    return _holding().order_by().values_list("runtime_id").annotate(n=Count("id"))


def slots_on_runtime():
    """An expression for a ``Runtime`` queryset: the slots held on each runtime (the same
    definition as ``slot_count``), one correlated count per row, for pages that annotate
    their list (the runtime changelist) instead of asking per row."""
    held = (
        _holding()
        .filter(runtime_id=OuterRef("pk"))
        .order_by()
        .values("runtime_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    return Coalesce(Subquery(held, output_field=IntegerField()), 0)


@dataclass(frozen=True)
class EngineUsage:
    """What one engine holds against its capacity (``engine_usage``)."""

    containers: int  # instances placed there, in every state but ``PLACE_FREE``
    slots: int  # create/start slots held there (the one definition above)


def engine_usage(*, slots: dict[int | None, int] | None = None) -> dict[int, EngineUsage]:
    """``{runtime_id: EngineUsage}`` (runtimes holding nothing are absent). Reads only;
    placement calls it with the capacity gate held, so what it sees is exact (every
    earlier holder committed). ``slots``: ``slots_by_runtime()`` when the caller has
    just counted it under the same gate (the create's admission, which also sums it for
    the global cap), so it is not counted twice.

    The containers from the instance tally (``containers.tallies``: its cost is the
    runtimes and statuses, where a grouped count read every instance placed anywhere
    and outside ``PLACE_FREE``, the running and the stopped alike), the slots from
    ``slots_by_runtime`` (the few ``creating``/``starting`` rows)."""
    if slots is None:
        slots = slots_by_runtime()
    containers: dict[int, int] = {}
    for (runtime_id, status), n in instance_counts().items():
        if runtime_id is not None and status not in PLACE_FREE:
            containers[runtime_id] = containers.get(runtime_id, 0) + n
    return {
        pk: EngineUsage(containers=containers.get(pk, 0), slots=slots.get(pk, 0))
        for pk in containers.keys() | {pk for pk in slots if pk is not None}
    }
