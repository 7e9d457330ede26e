"""What a create/start slot is (contract §4), defined once.

The capacity gate, the reconciler's ``start_timeout``, the queue stats and the tests'
samplers all count slots here, so they cannot disagree.

An instance holds a slot while it is ``creating`` or ``starting`` and its request is
in the slot: leased to a worker (``processing`` under a live lease) under the claim that
passed the capacity gate (``ContainerInstance.slot_token``, set by the handler under the
gate's lock), or finished while the instance has not settled yet (the worker returned;
the instance reaches ``running``, ``failed`` or ``stopped`` by the events or the
reconciler). It holds none while its request waits: ``pending`` (a retry's backoff, a
deferral), ``processing`` under a lease that ran out (its worker died; the row is due
again), or claimed again but not yet through the gate (a retry or a reclaim, whose new
claim is not the one that passed). A waiting request passes the gate again before it
calls the engine. So the count never passes ``create_queue_max_concurrency``: every
holder passed the gate, which counted the others under one lock.

Every time compared here is on the database's clock (``Now()``), as the leases are.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.db.models import BooleanField, DurationField, ExpressionWrapper, F, Q
from django.db.models.functions import Now

from containers.models import ContainerInstance
from containers.states import ACTIVE_SLOTS
from outbox.models import OutboxEvent, OutboxStatus

# A request that waits holds no slot: its retry's backoff, a deferral, a dead worker's row.
WAITING = Q(status=OutboxStatus.PENDING) | Q(
    status=OutboxStatus.PROCESSING, lease_expires_at__lte=Now()
)
UNFINISHED = (OutboxStatus.PENDING, OutboxStatus.PROCESSING)


def slot_count(*, exclude: uuid.UUID | str | None = None) -> int:
    """How many instances hold a slot now (``exclude``: leave one instance out).

    Reads only; the gate calls it with the capacity lock held, so its count is exact.
    """
    active = ContainerInstance.objects.filter(status__in=ACTIVE_SLOTS)
    if exclude is not None:
        active = active.exclude(id=exclude)
    admitted = {str(pk): token for pk, token in active.values_list("id", "slot_token")}
    if not admitted:
        return 0
    unfinished = (
        OutboxEvent.objects.filter(aggregate_id__in=admitted, status__in=UNFINISHED)
        .annotate(waits=ExpressionWrapper(WAITING, output_field=BooleanField()))
        .values_list("aggregate_id", "claim_token", "waits")
    )
    waiting = {
        aggregate for aggregate, token, waits in unfinished if waits or token != admitted[aggregate]
    }
    return len(admitted) - len(waiting)


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
        .values("status", "claim_token", "live", "age")
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
    admitted = (
        ContainerInstance.objects.filter(id=instance_id)
        .values_list("slot_token", flat=True)
        .first()
    )
    waiting = row["status"] == OutboxStatus.PENDING or (
        row["status"] == OutboxStatus.PROCESSING
        and not (row["live"] and row["claim_token"] == admitted)
    )
    return SlotHold(
        held=not waiting,
        leased=bool(row["live"]),
        waiting=waiting,
        seconds=None if waiting else _secs(row["age"]),
    )


def _secs(value: dt.timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()
