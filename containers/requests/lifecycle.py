"""Moving an instance between states, with its history and its capacity slot.

Every state change in gobrave goes through ``move()``: requests (``services``),
workers (``handlers``), the monitor and the reconciler. The caller holds the
instance's row lock inside a transaction.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from containers.actors import POLICY
from containers.counters import RequestStat
from containers.errors import InvalidTransition
from containers.models import ContainerEvent, ContainerInstance, Gate
from containers.queues import Queue
from containers.requests.slots import slot_count
from containers.signals import instance_moved
from containers.spec.redaction import scrub, scrub_data
from containers.states import ACTIVE_SLOTS, BEING_DELETED, Status, can_move
from core import prepared
from core.counters import counter_bump
from outbox.services import outbox_release_deferred
from webhooks.kinds import EventKind
from webhooks.services import webhook_events_emit

log = logging.getLogger(__name__)


def _locked(*, id: uuid.UUID):
    """The instance ``id``, locked ``FOR UPDATE``."""
    return ContainerInstance.objects.select_for_update().filter(id=id).order_by()


def _locked_with_runtime(*, id: uuid.UUID):
    """The instance ``id`` with its runtime (one join), only the instance's row locked."""
    rows = ContainerInstance.objects.select_for_update(of=("self",)).filter(id=id).order_by()
    return rows.select_related("runtime")


def instance_lock(
    instance_id: uuid.UUID | str, *, with_runtime: bool = False
) -> ContainerInstance | None:
    """Lock the instance's row for the rest of the current transaction and read it; None
    when there is none. ``with_runtime``: its ``Runtime`` row is read in the same
    statement (not locked: ``FOR UPDATE OF`` the instance). Raises ``ValueError`` for an
    id that is no uuid.

    Every request and every handler step starts here: the queryset is compiled once and
    run as a prepared statement on PostgreSQL (``core.prepared.first``).
    """
    key = uuid.UUID(str(instance_id))
    if with_runtime:
        return prepared.first("lifecycle.lock_with_runtime", _locked_with_runtime, id=key)
    return prepared.first("lifecycle.lock", _locked, id=key)


def instance_save(instance: ContainerInstance, fields: tuple[str, ...]) -> None:
    """``instance.save(update_fields=fields)``: on PostgreSQL one prepared statement per
    field list (``core.prepared.update``; a move saves the same six fields every time),
    so the ORM builds no UPDATE on every transition. The caller holds the row
    (``instance_lock``)."""
    prepared.update(instance, fields)


def instance_save_differing(instance: ContainerInstance, **values: Any) -> tuple[str, ...]:
    """Set the fields whose value differs from ``values`` and save only those, in the
    order given (``instance_save``; nothing is written when none differs); returns them.
    The caller holds the row (``instance_lock``)."""
    changed = tuple(name for name, value in values.items() if getattr(instance, name) != value)
    for name in changed:
        setattr(instance, name, values[name])
    if changed:
        instance_save(instance, changed)
    return changed


def container_id_record(
    *, instance_id: uuid.UUID, placed_on: int, runtime_id: str, node: str, status: str
) -> bool:
    """Record the engine's container id (``runtime_id``) and its host's name (``node``) on
    the instance if it is still in ``status`` and still placed on the runtime
    ``placed_on`` (the ``Runtime`` pk the caller's engine belongs to: a create placed
    again elsewhere meanwhile does not take a container of its old engine's); one
    statement (its own row lock, and its own commit outside a transaction; compiled once,
    prepared on PostgreSQL: ``core.prepared.update_rows``). False when the instance is
    gone or has moved on."""
    changed = prepared.update_rows(
        "lifecycle.container_id_record",
        lambda id, runtime, status, container, node: (
            ContainerInstance.objects.filter(id=id, runtime_id=runtime, status=status),
            {"container_id": container, "runtime_node_name": node},
        ),
        id=uuid.UUID(str(instance_id)),
        runtime=int(placed_on),
        status=str(status),
        container=runtime_id,
        node=node,
    )
    return changed == 1


def record(
    instance: ContainerInstance,
    *,
    kind: str,
    actor: str,
    message: str = "",
    from_status: str = "",
    to_status: str = "",
    data: dict[str, Any] | None = None,
    insert: bool = True,
) -> ContainerEvent:
    """Append one entry to the instance's history (on PostgreSQL a prepared INSERT,
    ``core.prepared.insert``). With ``insert=False`` the entry is only built, for a
    caller that writes it in a statement of its own (``move``)."""
    event = ContainerEvent(
        instance_id=instance.id,
        instance_name=instance.name,
        owner_id=instance.owner_id,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        message=message,
        actor=actor,
        data=data or {},
    )
    if insert:
        prepared.insert(event)
    return event


# What a transition method may set (``ContainerInstance.mark_*``), saved by every move.
MOVED_FIELDS = (
    "status",
    "status_changed_at",
    "status_reason",
    "started_at",
    "finished_at",
    "exit_code",
    # A wait for room on the engine ends with the state it happened in.
    "engine_waiting_since",
    "engine_placed_at",
    # So does a silence of its node (``engine_silent_since``).
    "engine_silent_since",
    # Lifecycle policies' deadlines, armed and cleared by the transitions.
    "stop_at",
    "extended_seconds",
    "idle_since",
    "cpu_sample",
    "delete_at",
)


def instance_notify(instance: ContainerInstance, kind: EventKind, **extra: Any) -> int:
    """Send the webhooks subscribed to ``kind`` about ``instance`` (its owner's endpoints
    and the operators'), in the current transaction (the one that made the event). The
    texts are scrubbed of host paths and engine addresses as for a user's page (the owner's
    endpoint receives them; operators read the unscrubbed history)."""
    return instances_notify([instance], kind, **extra)


def instances_notify(instances: list[ContainerInstance], kind: EventKind, **extra: Any) -> int:
    """``instance_notify`` of each of ``instances``: one lock of their endpoints, one
    write of their deliveries (``webhook_events_emit``)."""
    return webhook_events_emit(
        kind=kind,
        events=[
            (
                instance.owner_id,
                {
                    "instance": str(instance.id),
                    "name": instance.name,
                    "owner_id": instance.owner_id,
                    "status": instance.status,
                    "reason": scrub(instance.status_reason),
                    **scrub_data(extra),
                },
            )
            for instance in instances
        ],
    )


def move(
    instance: ContainerInstance,
    target: str,
    *,
    actor: str,
    kind: str = "transition",
    message: str = "",
    data: dict[str, Any] | None = None,
    saved: tuple[str, ...] = (),
    **fields: Any,
) -> ContainerInstance:
    """Transition ``instance`` to ``target``, save it and record the change.

    Must run inside a transaction on a row locked with ``select_for_update()``.
    Raises ``InvalidTransition`` (and changes nothing) when the move is not allowed.
    ``fields`` are passed to the transition method (``reason``, ``exit_code``);
    ``saved``: more fields the caller set on the instance, written by the same statement
    (a create's placement, ``placing.PLACED_FIELDS``).
    When the instance leaves a create/start slot, or its place on its engine (a delete
    accepted: ``Runtime.max_containers`` no longer counts it), deferred creates are woken.
    Sends ``instance_moved`` (in this transaction) once the change is recorded.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("move() must run inside transaction.atomic()")
    source = instance.status
    entry = _transition(
        instance, target, actor=actor, kind=kind, message=message, data=data, **fields
    )
    kept = getattr(_deferred, "moves", None)
    if kept is not None and not saved:  # written at the end of ``moves_deferred``
        kept.append((instance, source, entry))
        log.info("instance %s %s -> %s by %s %s", instance.id, source, target, actor, message)
        return instance
    if kept:  # a move with fields of its own: the moves kept so far go first
        _moves_write(kept[:])
        kept.clear()
    # One statement on PostgreSQL.
    prepared.update_and_insert(instance, MOVED_FIELDS + saved, entry)
    log.info("instance %s %s -> %s by %s %s", instance.id, source, target, actor, message)
    _moved([(instance, source)], target, actor=actor)
    return instance


_deferred = threading.local()  # ``moves_deferred``'s moves, per thread


@contextlib.contextmanager
def moves_deferred() -> Iterator[None]:
    """Inside, ``move`` makes each transition in memory (checked, as always) and keeps
    it; when the block ends the rows are written by one statement sent for them all
    (``prepared.update_many``) and their history entries by another
    (``prepared.insert_many``), then what follows the moves (``_moved``, once per target
    and actor). For a caller that moves many rows in one transaction holding their
    locks (``event_batch``): two statements' Python work instead of one per move. A row
    moved twice is written twice with its last state, in order. A move with ``saved``
    fields is made at once, after the moves kept so far. Nothing kept is written if the
    block raises (the transaction is then to be rolled back). Nested: the outer block
    writes."""
    if getattr(_deferred, "moves", None) is not None:
        yield
        return
    kept: list[tuple[ContainerInstance, str, ContainerEvent]] = []
    _deferred.moves = kept
    try:
        yield
    finally:
        _deferred.moves = None
    _moves_write(kept)


def _moves_write(kept: list[tuple[ContainerInstance, str, ContainerEvent]]) -> None:
    """Write the moves ``moves_deferred`` kept (``(instance, source, entry)`` each), then
    what follows them."""
    if not kept:
        return
    prepared.update_many([instance for instance, _, _ in kept], MOVED_FIELDS)
    prepared.insert_many([entry for _, _, entry in kept])
    groups: dict[tuple[str, str], list[tuple[ContainerInstance, str]]] = {}
    for instance, source, entry in kept:
        groups.setdefault((entry.to_status, entry.actor), []).append((instance, source))
    for (target, actor), moved in groups.items():
        _moved(moved, target, actor=actor)


def move_many(
    moves: list[tuple[ContainerInstance, str, dict[str, Any] | None]],
    target: str,
    *,
    actor: str,
    kind: str = "transition",
) -> None:
    """``move`` of many rows to one ``target`` (each with its history entry's message and
    data), in a few statements instead of a few per row, for a caller that asks for many
    at once (``containers.requests.bulk``). Must run inside a transaction that holds every
    row's lock.

    1. Each row's transition is checked and made (the state machine's, as ``move``'s):
       ``InvalidTransition`` for the first that is not allowed, before anything is
       written.
    2. The rows are saved in one round trip (``core.prepared.update_many``) and their
       history entries written in another (``core.prepared.insert_many``).
    3. Then what follows a move, as ``move`` does it: deferred creates woken (once),
       webhooks (one lock of their endpoints), ``instance_moved`` for each row.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("move_many() must run inside transaction.atomic()")
    for instance, _message, _data in moves:
        if not can_move(instance.status, target):
            raise InvalidTransition(
                f"cannot move {instance.container_name} from {instance.status} to {target}",
                status=instance.status,
                target=target,
            )
    moved, entries = [], []
    for instance, message, data in moves:
        source = instance.status
        entry = _transition(instance, target, actor=actor, kind=kind, message=message, data=data)
        moved.append((instance, source))
        entries.append(entry)
    prepared.update_many([instance for instance, _ in moved], MOVED_FIELDS)
    prepared.insert_many(entries)
    for (instance, source), (_, message, _data) in zip(moved, moves, strict=True):
        log.info("instance %s %s -> %s by %s %s", instance.id, source, target, actor, message)
    _moved(moved, target, actor=actor)


def _transition(
    instance: ContainerInstance,
    target: str,
    *,
    actor: str,
    kind: str,
    message: str,
    data: dict[str, Any] | None,
    **fields: Any,
) -> ContainerEvent:
    """Step 1 of a move: check and make the transition in memory (nothing written), and
    build the history entry that records it."""
    source = instance.status
    if not can_move(source, target):
        raise InvalidTransition(
            f"cannot move {instance.container_name} from {source} to {target}",
            status=source,
            target=target,
        )
    instance.transition_method(target)(**fields)
    return record(
        instance,
        kind=kind,
        actor=actor,
        message=message or instance.status_reason,
        from_status=source,
        to_status=target,
        data=data,
        insert=False,
    )


def _moved(moved: list[tuple[ContainerInstance, str]], target: str, *, actor: str) -> None:
    """What follows recorded moves to ``target`` (``(instance, source)`` each), in the
    moves' transaction."""
    # A freed slot, or a delete accepted (room on its engine; or, for a create waiting
    # unplaced, its parked request must end now so that the delete behind it runs), or a
    # waiting start cancelled (its parked request ends now, the stop behind it runs).
    if any(
        (source in ACTIVE_SLOTS and target not in ACTIVE_SLOTS)
        or (target in BEING_DELETED and source not in BEING_DELETED)
        or (source == Status.START_PENDING and target != Status.STARTING)
        for _, source in moved
    ):
        outbox_release_deferred(queue=Queue.CREATE)
    instances = [instance for instance, _ in moved]
    if target == Status.FAILED:
        failed = len(instances)
        transaction.on_commit(lambda: counter_bump(RequestStat.INSTANCE_FAILED, by=failed))
        instances_notify(instances, EventKind.INSTANCE_FAILED, actor=actor)
    elif target == Status.STOP_PENDING and actor == POLICY:
        instances_notify(instances, EventKind.INSTANCE_CULLED, actor=actor)
    for instance, source in moved:
        instance_moved.send(
            sender=ContainerInstance, instance=instance, source=source, target=target, actor=actor
        )


def _gate_locked(name: str) -> bool:
    """Lock the gate's row if it exists (compiled once, a prepared statement on
    PostgreSQL: every create takes the admission gate, every create and start the
    capacity gate)."""
    found = prepared.rows(
        "lifecycle.gate_lock",
        lambda name: Gate.objects.select_for_update().filter(name=name).values_list("pk"),
        name=name,
    )
    return bool(found)


def lock_gate(name: str) -> None:
    """Take the global gate ``name`` for the rest of the current transaction.

    The rows come from a migration; one that went missing (a flushed database) is made
    again, without a race, before it is locked.
    """
    if not _gate_locked(name):
        Gate.objects.bulk_create([Gate(name=name)], ignore_conflicts=True)
        Gate.objects.select_for_update().get(name=name)


def capacity_available(*, exclude: uuid.UUID | str | None = None) -> bool:
    """Hold the capacity gate and say whether a create/start slot is free.

    Slots are counted as ``containers.requests.slots`` defines them (a request waiting for its
    retry holds none). ``exclude``: the instance asking, when it is already in
    ``creating``/``starting`` (a retry, or a reclaim after its worker died): it passes
    the gate again before it calls the engine. Must run inside the transaction that
    then moves the instance into its slot (or goes on with it).
    """
    lock_gate("capacity")
    held = slot_count(exclude=exclude)
    return held < settings.GOBRAVE["container"]["create_queue_max_concurrency"]


def _in_slots(ids: list[str]) -> set[str]:
    """Which of the instances ``ids`` are in ``creating``/``starting`` (on every claim of
    the create queue). Compiled once per number of ids (a claim takes at most
    ``batch_size``), a prepared statement on PostgreSQL (``core.prepared.rows``)."""
    keys = sorted({uuid.UUID(each) for each in ids})
    if not keys:
        return set()
    found = prepared.rows(
        ("lifecycle.in_slots", len(keys)),
        lambda **each: (
            ContainerInstance.objects.filter(
                id__in=list(each.values()), status__in=sorted(ACTIVE_SLOTS)
            )
            .order_by()
            .values_list("id")
        ),
        **{f"id{i}": key for i, key in enumerate(keys)},
    )
    return {str(pk) for (pk,) in found}


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
