"""Moving an instance between states, with its history and its capacity slot.

Every state change in gobrave goes through ``move()``: requests (``services``),
workers (``handlers``), the monitor and the reconciler. The caller holds the
instance's row lock inside a transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from containers.counters import RequestStat
from containers.errors import InvalidTransition
from containers.models import ContainerEvent, ContainerInstance, Gate, Runtime
from containers.queues import Queue
from containers.requests.slots import slot_count
from containers.signals import instance_moved
from containers.states import ACTIVE_SLOTS, Status, can_move
from core import prepared
from core.counters import counter_bump
from outbox.services import outbox_release_deferred

log = logging.getLogger(__name__)


_INSTANCES = ContainerInstance._meta.db_table
_INSTANCE_COLUMNS = prepared.columns(ContainerInstance, "i")
_LOCK = f"SELECT {_INSTANCE_COLUMNS} FROM {_INSTANCES} i WHERE i.id = %(id)s FOR UPDATE"
_LOCK_WITH_RUNTIME = (
    f"SELECT {_INSTANCE_COLUMNS}, {prepared.columns(Runtime, 'r')} FROM {_INSTANCES} i"
    f" JOIN {Runtime._meta.db_table} r ON r.id = i.runtime_id WHERE i.id = %(id)s FOR UPDATE OF i"
)


def instance_lock(
    instance_id: uuid.UUID | str, *, with_runtime: bool = False
) -> ContainerInstance | None:
    """Lock the instance's row for the rest of the current transaction and read it; None
    when there is none. ``with_runtime``: its ``Runtime`` row is read in the same
    statement (not locked). Raises ``ValueError`` for an id that is no uuid.

    Every request and every handler step starts here: on PostgreSQL a prepared statement
    (``core.prepared``), the ORM's ``select_for_update()`` elsewhere.
    """
    key = uuid.UUID(str(instance_id))
    if not prepared.active():
        rows = ContainerInstance.objects.select_for_update().filter(id=key)
        return (rows.select_related("runtime") if with_runtime else rows).first()
    row = prepared.execute(_LOCK_WITH_RUNTIME if with_runtime else _LOCK, {"id": key}).fetchone()
    if row is None:
        return None
    width = len(ContainerInstance._meta.concrete_fields)
    instance = prepared.from_row(ContainerInstance, row[:width])
    if with_runtime:
        ContainerInstance.runtime.field.set_cached_value(
            instance, prepared.from_row(Runtime, row[width:])
        )
    return instance


def instance_save(instance: ContainerInstance, fields: tuple[str, ...]) -> None:
    """``instance.save(update_fields=fields)``: on PostgreSQL one prepared statement per
    field list (``core.prepared.update``; a move saves the same six fields every time),
    so the ORM builds no UPDATE on every transition. The caller holds the row
    (``instance_lock``)."""
    prepared.update(instance, fields)


_RECORD_ID = (
    f"UPDATE {_INSTANCES} SET container_id = %(runtime_id)s, runtime_node_name = %(node)s"
    " WHERE id = %(pk)s AND status = %(status)s"
)


def container_id_record(*, instance_id: uuid.UUID, runtime_id: str, node: str, status: str) -> bool:
    """Record the engine's container id and its host's name (``node``) on the instance if
    it is still in ``status``; one statement (its own row lock, and its own commit outside
    a transaction; prepared on PostgreSQL). False when the instance is gone or has moved
    on."""
    if not prepared.active():
        rows = ContainerInstance.objects.filter(id=instance_id, status=status)
        return rows.update(container_id=runtime_id, runtime_node_name=node) == 1
    params = {"runtime_id": runtime_id, "node": node, "pk": instance_id, "status": str(status)}
    return prepared.execute(_RECORD_ID, params).rowcount == 1


def record(
    instance: ContainerInstance,
    *,
    kind: str,
    actor: str,
    message: str = "",
    from_status: str = "",
    to_status: str = "",
    data: dict[str, Any] | None = None,
) -> ContainerEvent:
    """Append one entry to the instance's history (on PostgreSQL a prepared INSERT,
    ``core.prepared.insert``)."""
    event = _entry(instance, kind, actor, message, from_status, to_status, data)
    prepared.insert(event)
    return event


def _entry(
    instance: ContainerInstance,
    kind: str,
    actor: str,
    message: str,
    from_status: str,
    to_status: str,
    data: dict[str, Any] | None,
) -> ContainerEvent:
    return ContainerEvent(
        instance_id=instance.id,
        instance_name=instance.name,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        message=message,
        actor=actor,
        data=data or {},
    )


# What a transition method may set (``ContainerInstance.mark_*``), saved by every move.
MOVED_FIELDS = (
    "status",
    "status_changed_at",
    "status_reason",
    "started_at",
    "finished_at",
    "exit_code",
)


def move(
    instance: ContainerInstance,
    target: str,
    *,
    actor: str,
    kind: str = "transition",
    message: str = "",
    data: dict[str, Any] | None = None,
    **fields: Any,
) -> ContainerInstance:
    """Transition ``instance`` to ``target``, save it and record the change.

    Must run inside a transaction on a row locked with ``select_for_update()``.
    Raises ``InvalidTransition`` (and changes nothing) when the move is not allowed.
    ``fields`` are passed to the transition method (``reason``, ``exit_code``).
    When the instance leaves a create/start slot, deferred creates are woken.
    Sends ``instance_moved`` (in this transaction) once the change is recorded.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("move() must run inside transaction.atomic()")
    source = instance.status
    if not can_move(source, target):
        raise InvalidTransition(
            f"cannot move {instance.container_name} from {source} to {target}",
            status=source,
            target=target,
        )
    instance.transition_method(target)(**fields)
    entry = _entry(instance, kind, actor, message or instance.status_reason, source, target, data)
    prepared.update_and_insert(instance, MOVED_FIELDS, entry)  # one statement on PostgreSQL
    log.info("instance %s %s -> %s by %s %s", instance.id, source, target, actor, message)
    if source in ACTIVE_SLOTS and target not in ACTIVE_SLOTS:
        outbox_release_deferred(queue=Queue.CREATE)
    if target == Status.FAILED:
        transaction.on_commit(lambda: counter_bump(RequestStat.INSTANCE_FAILED))
    instance_moved.send(
        sender=ContainerInstance, instance=instance, source=source, target=target, actor=actor
    )
    return instance


_LOCK_GATE = f"SELECT 1 FROM {Gate._meta.db_table} WHERE name = %(name)s FOR UPDATE"


def _gate_locked(name: str) -> bool:
    """Lock the gate's row if it exists (on PostgreSQL a prepared statement: every create
    takes the admission gate, every create and start the capacity gate)."""
    if prepared.active():
        return prepared.execute(_LOCK_GATE, {"name": name}).fetchone() is not None
    return Gate.objects.select_for_update().filter(name=name).exists()


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


def claims_within_capacity(rows: Sequence[tuple[int, str]]) -> list[int]:
    """The create queue's claim guard (``outbox.registry.register_claim_guard``): which of
    the rows a claim selected it may take without passing the cap (contract §4).

    1. A row whose instance is not ``creating``/``starting`` (a fresh create or start)
       takes no slot when claimed: its handler passes the gate. All such rows go.
    2. A row whose instance is already ``creating``/``starting`` (a retry due, a lease
       reclaimed) makes it a slot the moment it is claimed. If there are any, take the
       capacity gate (for the rest of the claim's transaction: the claim commits them
       ``processing`` under it), count the slots, and let the first ``cap - slots`` of
       them go in claim order; the rest are held back, still due.
    Lock order: the claim's rows, then the gate; no holder of the gate waits on an
    outbox row lock (the gate's holders are this guard and the handlers' first step,
    which writes no outbox row), so there is no cycle.
    """
    active = _in_slots([aggregate for _, aggregate in rows if _is_uuid(aggregate)])
    if not active:
        return [row_id for row_id, _ in rows]
    lock_gate("capacity")
    room = settings.GOBRAVE["container"]["create_queue_max_concurrency"] - slot_count()
    allowed = []
    for row_id, aggregate in rows:
        if aggregate in active:
            if room <= 0:
                continue
            room -= 1
        allowed.append(row_id)
    return allowed


_SLOTS_SQL = ", ".join(sorted(f"'{status.value}'" for status in ACTIVE_SLOTS))
_IN_SLOTS = f"""SELECT id::text FROM {ContainerInstance._meta.db_table}
WHERE id = ANY(%(ids)s::uuid[]) AND status IN ({_SLOTS_SQL})"""


def _in_slots(ids: list[str]) -> set[str]:
    """Which of the instances ``ids`` are in ``creating``/``starting`` (on every claim of
    the create queue: a prepared statement on PostgreSQL, ``core.prepared``)."""
    if not ids:
        return set()
    if prepared.active():
        found = prepared.execute(_IN_SLOTS, {"ids": ids})
        return {row_id for (row_id,) in found.fetchall()}
    rows = ContainerInstance.objects.filter(id__in=ids, status__in=ACTIVE_SLOTS)
    return {str(pk) for pk in rows.values_list("id", flat=True)}


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
