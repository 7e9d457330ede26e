"""What several engine events say, applied to their instances in one transaction.

The monitor applies an event with a look of its own (``sync.instance_sync``: a read,
the outbox asked, a row lock, a write, a commit: five round trips to the database, which
under load are most of an event's time). A burst (a thousand Pods ending at once) pays
that per event. Where the event alone says what to apply, with no engine call (a clean
exit followed from its create, ``sync.clean_exit_apply``; or the container's state the
event carries, of the instance's current run, ``sync.event_state_current``), the events
of distinct instances are applied together here, with the same rules, in one
transaction: the rows locked in one statement (in id order), the outbox asked once, one
write per instance, all sent without waiting for each answer (``prepared.pipelined``:
about one round trip for the lot), the state changes themselves as two statements for
the whole batch (``lifecycle.moves_deferred``: the rows, then their history entries),
one commit.

An event this cannot settle from what it holds (its state may be an earlier run's, the
row is ``failed`` and only backfilled, no node name known...) gets ``None``: the caller
applies it the usual way, after this transaction.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from containers.engines.base import ContainerState
from containers.execution.sync import (
    CLEAN_EXIT_FROM,
    WATCHED,
    Sync,
    event_state_current,
    instance_backfill,
    recorded_after,
    runs_ahead_of_worker,
    state_apply,
)
from containers.models import ContainerEvent, ContainerInstance
from containers.queues import RequestKind
from containers.requests.lifecycle import instance_lock, moves_deferred
from containers.states import IN_FLIGHT, Status
from core import prepared
from outbox.models import UNFINISHED, OutboxEvent


@dataclass(frozen=True)
class Seen:
    """One event to apply: its instance, the container's state the event carried (None:
    none, for a clean exit), the container's id, whether it is a clean exit as the
    stream's order says, and what goes on the history entries."""

    instance_id: uuid.UUID
    runtime_id: str
    state: ContainerState | None
    clean_exit: bool
    data: dict[str, Any]


def _locked(ids: list[uuid.UUID]) -> dict[uuid.UUID, ContainerInstance]:
    if len(ids) == 1:  # a lone event's: the lifecycle's prepared lock, no query compiled
        row = instance_lock(ids[0])
        return {row.id: row} if row is not None else {}
    rows = ContainerInstance.objects.select_for_update().filter(id__in=ids).order_by("id")
    return {row.id: row for row in rows}


def _busy(ids: list[uuid.UUID]) -> set[str]:
    if not ids:
        return set()
    found = OutboxEvent.objects.filter(
        aggregate_id__in=[str(i) for i in ids], status__in=UNFINISHED
    ).values_list("aggregate_id", flat=True)
    return set(found)


def _started_again(ids: list[uuid.UUID]) -> set[uuid.UUID]:
    if not ids:
        return set()
    found = ContainerEvent.objects.filter(instance_id__in=ids, kind=RequestKind.START)
    return set(found.values_list("instance_id", flat=True))


def events_apply(
    *,
    seen: list[Seen],
    actor: str,
    runtime_pk: int,
    left: dict[uuid.UUID, ContainerInstance] | None = None,
) -> dict[uuid.UUID, Sync | None]:
    """Apply ``seen`` (one event per instance) in one transaction; returns each
    instance's outcome (``Sync``), None for those left to the caller (see the module
    docstring). Must run outside a transaction; raises what the database raises (a
    deadlock...), with nothing applied. ``runtime_pk``: the runtime whose stream the
    events came from; an instance placed on another row is left to the caller
    (``monitor.on_this_engine``: a create placed again elsewhere may have left a
    container here that says nothing about it). ``left``: filled with the row of each
    instance left to the caller, as this transaction read it (unchanged: the caller's
    look may start from it instead of reading it again, as from any unlocked read).
    Also for a single event (the monitor sends it here too): it then costs the row's
    lock, one pipelined send of its writes and the commit.

    1. Lock every row (one statement, in id order, as no other transaction locks
       several), read which are asked to start again (for a clean exit of a running
       row) and which have a request unfinished (one statement each, each only when
       some row needs it: not for a state that runs ahead of its worker,
       ``runs_ahead_of_worker``, which is applied whatever the worker does).
    2. A clean exit: as ``sync.clean_exit_apply`` (the instance still records that
       container, ``creating`` or ``running`` recorded before the exit and never asked
       to start again): ``exited 0`` applied; otherwise as 3, if the event carries a
       state, else left to the caller.
    3. A carried state: as ``sync.instance_sync`` on the locked row: skipped unless
       watched, ``BUSY`` while a request is unfinished (unless ``runs_ahead_of_worker``),
       left to the caller unless the state is surely of the current run
       (``event_state_current``) and a node name is known; else the backfill and
       ``state_apply``.
    """
    ids = sorted({each.instance_id for each in seen})
    outcomes: dict[uuid.UUID, Sync | None] = {}
    with transaction.atomic():
        rows = _locked(ids)
        running = [i for i, row in rows.items() if row.status == Status.RUNNING]
        again = _started_again(
            [i for i in running if any(s.clean_exit for s in seen if s.instance_id == i)]
        )
        busy = _busy([each.instance_id for each in seen if _asks_busy(rows, each)])
        # the writes: ~one round trip; several moves in two statements for the lot (one
        # move: its own statement, the row and its history entry at once)
        deferred = moves_deferred() if len(seen) > 1 else contextlib.nullcontext()
        with prepared.pipelined(defer=(ContainerEvent,)), deferred:
            for each in seen:
                row = rows.get(each.instance_id)
                if row is None:
                    outcomes[each.instance_id] = Sync.SKIPPED
                    continue
                if row.runtime_id not in (None, runtime_pk):
                    outcomes[each.instance_id] = None
                    continue
                outcome = None
                if each.clean_exit:
                    outcome = _clean_exit(row, each, again, actor)
                if outcome is None and each.state is not None:
                    outcome = _carried(row, each, busy, actor)
                outcomes[each.instance_id] = outcome
                if outcome is None and left is not None:
                    left[each.instance_id] = row
    return outcomes


def _asks_busy(rows: dict[uuid.UUID, ContainerInstance], each: Seen) -> bool:
    """Whether ``_carried`` needs to know if ``each``'s instance has a request unfinished:
    a state carried for a row in flight, unless it runs ahead of the worker."""
    row = rows.get(each.instance_id)
    if row is None or row.status not in IN_FLIGHT or each.state is None:
        return False
    return not (event_state_current(row, each.state) and runs_ahead_of_worker(row, each.state))


def _clean_exit(row: ContainerInstance, each: Seen, again: set, actor: str) -> Sync | None:
    if row.status not in CLEAN_EXIT_FROM or row.container_id != each.runtime_id:
        return None
    if row.status == Status.RUNNING and (
        recorded_after(row, each.data.get("time_nano")) or row.id in again
    ):
        return None
    state = ContainerState(
        runtime_id=each.runtime_id, name=row.container_name, status="exited", exit_code=0
    )
    changed = state_apply(row, state, actor=actor, data=each.data)
    return Sync.CHANGED if changed else Sync.UNCHANGED


def _carried(row: ContainerInstance, each: Seen, busy: set[str], actor: str) -> Sync | None:
    state = each.state
    assert state is not None
    if row.status == Status.FAILED:
        return None  # the backfill only: the usual way
    if row.status not in WATCHED:
        return Sync.SKIPPED
    current = event_state_current(row, state)
    if (
        row.status in IN_FLIGHT
        and str(row.id) in busy
        and not (current and runs_ahead_of_worker(row, state))
    ):
        return Sync.BUSY
    if not current:
        return None
    node = state.node_name
    if not node and not row.runtime_node_name:
        return None  # the engine's own node name: the usual way
    instance_backfill(row, state, node)
    changed = state_apply(row, state, actor=actor, data=each.data)
    return Sync.CHANGED if changed else Sync.UNCHANGED
