"""What a claim picks: due rows with no older unfinished row of their aggregate, expired
leases first, then pending rows round-robin by fairness key (``_pick``), and the turns of
the keys served (``_mark_served``)."""

from __future__ import annotations

import itertools

from django.db import connection
from django.db.models import Exists, Max, OuterRef
from django.db.models.functions import Now
from django.utils import timezone

from outbox import conf, picking
from outbox.models import UNFINISHED, FairnessMark, OutboxEvent, OutboxStatus


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
