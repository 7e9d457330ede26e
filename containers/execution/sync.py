"""Apply what the engine says to an instance (contract §5), in one place.

The monitor (after an event), the reconciler (every pass) and the request handlers
(after their own engine calls) all come here:

- ``state_apply`` moves a locked instance as an engine state implies
  (``observe.target_for``, by the shortest true path of ``observe.apply_observation``);
- ``instance_sync`` is the whole look: read, inspect the engine with no transaction
  open, lock, backfill what the engine knows, ``state_apply``;
- ``clean_exit_apply`` applies a ``die`` with exit code 0 that the monitor followed from
  the container's create, without the inspect (it may move an instance whose create
  is still running: see there).

Which instances are compared: those in ``WATCHED`` states. ``pending``,
``start_pending``, ``stop_pending`` and ``delete_pending`` have a request queued whose
worker inspects the engine itself; ``failed`` is terminal. A watched instance whose
request is still unfinished in the outbox (``creating`` while its create runs) is also
left to that worker by ``instance_sync`` (not by ``clean_exit_apply``): the engine may
show a past state (the old exit code of a container
being started) that the worker is about to change.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from containers.engines import engine_for
from containers.engines.base import ContainerState, Engine
from containers.engines.labels import LABEL_INSTANCE
from containers.execution.engine_loss import instance_node_lost
from containers.execution.observe import apply_observation, target_for
from containers.models import ContainerEvent, ContainerInstance
from containers.queues import RequestKind
from containers.requests.lifecycle import instance_lock, instance_save_differing
from containers.states import ACTIVE_SLOTS, IN_FLIGHT, Status
from core import prepared
from outbox.models import UNFINISHED, OutboxEvent

# States in which the engine's view matters (see ``instance_sync``).
WATCHED = frozenset(
    {
        Status.CREATING,
        Status.RUNNING,
        Status.PAUSED,
        Status.STARTING,
        Status.STOPPING,
        Status.STOPPED,
        Status.DELETING,
    }
)


class Sync(enum.StrEnum):
    """What ``instance_sync`` did."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    BUSY = "busy"  # a worker's request for it is unfinished: the worker will look itself
    RACED = "raced"  # it moved while the engine was being asked: the next look catches up
    SKIPPED = "skipped"  # gone, or in a state the engine's view does not change


def request_unfinished(instance_id: uuid.UUID | str) -> bool:
    """True while an outbox row for the instance is pending or processing (the monitor
    asks on every event of an instance at work: on PostgreSQL a prepared statement)."""
    return prepared.exists(
        "sync.request_unfinished",
        lambda aggregate: OutboxEvent.objects.filter(aggregate_id=aggregate, status__in=UNFINISHED),
        aggregate=str(instance_id),
    )


def instance_read(instance_id: uuid.UUID | str) -> ContainerInstance | None:
    """The instance's row, unlocked (the monitor reads one per event: on PostgreSQL a
    prepared statement)."""
    return prepared.first(
        "sync.instance_read",
        lambda id: ContainerInstance.objects.filter(id=id),
        id=uuid.UUID(str(instance_id)),
    )


def running_as_recorded(instance: ContainerInstance, runtime_id: str, engine_status: str) -> bool:
    """True when the engine says ``running`` of the container the instance records and
    the instance is ``running``, with nothing left to backfill: a look (inspect, lock,
    ``state_apply``) would change nothing, as ``target_for`` of a running container is
    ``running``. What happens to it later comes with events of its own (``die``...)."""
    return (
        engine_status == "running"
        and instance.status == Status.RUNNING
        and instance.container_id == runtime_id
        and bool(instance.runtime_node_name)
        and not instance.runtime_missing
        and not instance.status_reason.startswith(SILENT_PREFIX)  # its node answers again
    )


# Engine states in which a stopped instance's container says nothing new (``target_for``).
_AT_REST = frozenset({"exited", "dead", "created"})


def stopped_as_recorded(instance: ContainerInstance, runtime_id: str, engine_status: str) -> bool:
    """True when a look at a ``stopped`` instance would change nothing: the engine lists
    its container at rest (``target_for`` of an exited container of a stopped instance is
    the exit already recorded), nothing is left to backfill; or the container is gone and
    the instance is already marked missing (recorded once, when first seen)."""
    if instance.status != Status.STOPPED:
        return False
    if not engine_status:
        return instance.runtime_missing and bool(instance.runtime_node_name)
    return (
        engine_status in _AT_REST
        and instance.container_id == runtime_id
        and bool(instance.runtime_node_name)
        and not instance.runtime_missing
    )


def instance_label(state: ContainerState) -> uuid.UUID | None:
    """The instance a container belongs to, from its ``io.gobrave.instance`` label."""
    try:
        return uuid.UUID(state.labels.get(LABEL_INSTANCE, ""))
    except ValueError:
        return None


def instance_backfill(instance: ContainerInstance, state: ContainerState | None, node: str) -> None:
    """Fill the node name and container id the engine knows; clear a stale missing mark.
    On the locked row; written as a prepared statement (``instance_save_differing``), which inside
    ``prepared.pipelined`` (a monitor's batch) waits for no answer."""
    known: dict[str, Any] = {}
    if not instance.runtime_node_name and node:
        known["runtime_node_name"] = node
    if state is not None and not instance.container_id:
        known["container_id"] = state.runtime_id
    if state is not None:
        known["runtime_missing"] = False
    instance_save_differing(instance, **known)


def instance_sync(
    *,
    instance_id: uuid.UUID | str,
    actor: str,
    engine: Engine | None = None,
    data: dict[str, Any] | None = None,
    read: ContainerInstance | None = None,
    seen_state: ContainerState | None = None,
) -> Sync:
    """Compare one instance with its engine and apply what the engine says (contract §5).

    Must run outside a transaction. Idempotent. Returns what it did (``Sync``).
    1. Read the instance (no lock; ``read``: the caller's read of it just now). Skip it
       unless it is watched (or ``failed`` with no node name yet and not marked missing,
       for the backfill only);
       leave it to the worker (``BUSY``) while a request for it is unfinished, unless
       ``seen_state`` is of its current run and says it runs (``runs_ahead_of_worker``).
    2. Inspect its container (no transaction open), unless ``seen_state`` (the state an
       engine event carried) is surely of its current run (``event_state_current``):
       then that is what the engine says.
    3. Lock the row; if its state moved meanwhile, stop (``RACED``).
    4. Backfill the node name and container id.
    5. Apply ``target_for`` by the shortest true path. Not applied: a container missing
       for a ``deleting`` instance (our own delete did it), for a ``stopped`` instance
       on an engine whose stop removes its object (``Engine.stop_removes``: normal),
       and a ``stopped`` instance already marked missing (recorded once, when first
       seen).
    ``data`` (e.g. the engine event that prompted the look) goes on the history entries.
    """
    instance = read or instance_read(instance_id)
    if instance is None:
        return Sync.SKIPPED
    backfill_only = instance.status == Status.FAILED
    if backfill_only and (
        instance.runtime_node_name or not instance.container_id or instance.runtime_missing
    ):
        return Sync.SKIPPED  # (failed and missing: its container was given up, see orphans)
    if not backfill_only and instance.status not in WATCHED:
        return Sync.SKIPPED
    carried = seen_state is not None and event_state_current(instance, seen_state)
    if (
        instance.status in IN_FLIGHT
        and not (carried and seen_state is not None and runs_ahead_of_worker(instance, seen_state))
        and request_unfinished(instance.id)
    ):
        return Sync.BUSY
    engine = engine or engine_for(instance.runtime)
    if carried:
        state: ContainerState | None = seen_state
    else:
        state = engine.inspect(instance.container_id or instance.container_name)
    node = state.node_name if state and state.node_name else ""
    if not node and not instance.runtime_node_name:
        node = engine.node_name()
    with transaction.atomic():
        locked = instance_lock(instance.id)
        if locked is None:
            return Sync.SKIPPED
        if (locked.status, locked.status_changed_at) != (
            instance.status,
            instance.status_changed_at,
        ):
            return Sync.RACED
        instance_backfill(locked, state, node)
        if backfill_only:
            return Sync.UNCHANGED
        if state is None and (
            locked.status == Status.DELETING
            or (locked.status == Status.STOPPED and (locked.runtime_missing or engine.stop_removes))
        ):
            return Sync.UNCHANGED
        changed = state_apply(locked, state, actor=actor, data=data)
        return Sync.CHANGED if changed else Sync.UNCHANGED


# Engine states an event may carry that are applied without an inspect (``event_state_current``).
_FROM_EVENT = frozenset({"running", "exited", "rejected", "created"})
# Of those, the ones that say when they happened: (the state, its time).
_TIMED = {"running": "started_at", "exited": "finished_at"}


def event_state_current(instance: ContainerInstance, state: ContainerState) -> bool:
    """True when ``state``, the container's state an engine event carried (a Pod in a
    Kubernetes watch event), is surely of the instance's current run, so applying it
    says what an inspect now would, or what the events behind it in the stream will
    move on from. False (the caller inspects): it may be an earlier run's, replayed
    after a restart of the monitor (whose cursor lags the events applied by up to a
    second; the stream then delivers them again, each with the Pod as it was then).

    1. It is of the container the instance records (or none is recorded yet).
    2. A ``creating`` instance has had no run before (its container's name is its own):
       ``running``, ``exited``, ``rejected`` and ``created`` (waiting) are of this one.
    3. In any other state, only ``running`` begun, or ``exited`` ended, at or after the
       instance entered that state (``status_changed_at``): an earlier run began before
       the request that started this one. The engine's times are whole seconds (the
       Kubernetes API's), so a run that began within the same second as the state takes
       the inspect; the engine's clock is compared with the app's (NTP-close, as every
       cluster's nodes are).
    4. Anything else (``unknown``, ``removing``, ``paused``...) is inspected.
    """
    if instance.container_id and state.runtime_id != instance.container_id:
        return False
    if state.status not in _FROM_EVENT:
        return False
    if instance.status == Status.CREATING:
        return True
    field = _TIMED.get(state.status)
    at = getattr(state, field) if field else None
    return at is not None and at >= instance.status_changed_at


def runs_ahead_of_worker(instance: ContainerInstance, state: ContainerState) -> bool:
    """True when ``state``, carried by an event and of the instance's current run
    (``event_state_current``), says the container of a ``creating`` or ``starting``
    instance runs: applied at once, while the worker still holds its request, as a
    clean exit is. That worker has made its start call (the container runs), and its
    own look after it finds the instance moved on and changes nothing; a retry of its
    request finds it ``running`` and is superseded. (A start whose engine runs the
    container later, Kubernetes', would otherwise wait for the worker to finish and a
    look after it: tens of ms on every create.)"""
    return state.status == "running" and instance.status in ACTIVE_SLOTS


# Where a clean exit seen in the event stream may be applied without an inspect.
CLEAN_EXIT_FROM = frozenset({Status.CREATING, Status.RUNNING})


def clean_exit_apply(
    *,
    instance_id: uuid.UUID | str,
    runtime_id: str,
    actor: str,
    data: dict[str, Any] | None = None,
) -> Sync | None:
    """Apply an exit with code 0 that the engine's event stream reported, without asking
    the engine again; None when it does not apply (the caller takes ``instance_sync``).

    The monitor calls it only for a ``die`` with exit code 0 of a container whose whole
    life it followed in one stream session: its ``create``, exactly one ``start``, no
    ``oom`` (``monitor.StreamSeen``). An inspect would say the same (exited, code 0, not
    OOM-killed), except for an ``oom`` the engine reports after the ``die`` (a child
    killed for memory an instant before PID 1 exits 0) or one the engine's event
    publisher dropped for a lagging monitor: then the exit stays ``stopped``, code 0,
    where an inspect might have said ``OOMKilled``. The engine answers an inspect only
    once it has torn the container down (tens of ms after the ``die``, while it holds
    the container's lock); a node of a DAG waits that long for nothing. Must run
    outside a transaction. Under the row lock:
    1. The instance still records that container (``container_id``) and is ``creating``
       (its create worker is still in its calls: its later look finds the state moved
       on and changes nothing) or ``running``, recorded so before the exit and never
       asked to start again (a ``ContainerStartRequest`` in its history): otherwise that
       die may be an earlier run's. A ``running`` recorded after the exit (the worker's
       look raced it, or the run was started again) takes the inspect.
    2. Apply ``exited 0`` as any engine view is applied (``state_apply``): ``stopped``,
       exit code 0.
    """
    with transaction.atomic():
        locked = instance_lock(instance_id)
        if (
            locked is None
            or locked.status not in CLEAN_EXIT_FROM
            or locked.container_id != runtime_id
        ):
            return None
        if locked.status == Status.RUNNING and (
            recorded_after(locked, (data or {}).get("time_nano")) or _started_again(locked.id)
        ):
            return None
        state = ContainerState(
            runtime_id=runtime_id, name=locked.container_name, status="exited", exit_code=0
        )
        changed = state_apply(locked, state, actor=actor, data=data)
        return Sync.CHANGED if changed else Sync.UNCHANGED


def _started_again(instance_id: uuid.UUID) -> bool:
    """True when the instance was ever asked to start again (a ``ContainerStartRequest`` in
    its history; every clean exit of a running instance asks: a prepared statement on
    PostgreSQL)."""
    return prepared.exists(
        "sync.started_again",
        lambda id: ContainerEvent.objects.filter(instance_id=id, kind=RequestKind.START),
        id=instance_id,
    )


def recorded_after(instance: ContainerInstance, time_nano: int | None) -> bool:
    """True when the instance's current state was recorded after the exit (or the exit's
    time is unknown): that ``die`` may end an earlier run than the one it records (a run
    started again outside a start request: a create retry adopting the exited container,
    or a ``docker start`` behind our back). Engine clock against the app's: a skew only
    sends more exits to the inspect."""
    if not time_nano:
        return True
    died = dt.datetime.fromtimestamp(time_nano / 1e9, tz=dt.UTC)
    return instance.status_changed_at > died


def _engine_wait_record(instance: ContainerInstance, state: ContainerState | None) -> None:
    """Record, on the locked row, whether the engine waits for room of its own for this
    instance (a Pod waiting for a node: ``ContainerState.waiting``) and when that wait
    ends. Only while the instance is ``creating``/``starting`` (``ACTIVE_SLOTS``); every
    transition clears what this records (``ContainerInstance._changed``).

    1. It waits: from when (``engine_waiting_since``: from then on it holds no slot and
       ``start_timeout`` does not run) and why (its ``status_reason``).
    2. It no longer waits but has not moved on (the Pod was scheduled and does not run
       yet): when (``engine_placed_at``), and the "waiting for a node" reason clears.
       ``engine_waiting_since`` stays: the instance still holds no slot, since taking
       one now would pass no capacity gate (the engine has it; the gate let it through
       once). ``start_timeout`` runs again, the wait not counted
       (``reconciler.instance_fail_stuck``).
    3. It waits again after that (rare: a Pod made again in the same state): the wait
       goes on from the first one's start (the time between is not counted towards
       ``start_timeout``: more lenient, never sooner).
    Idempotent: a look that says what the row records writes nothing.
    """
    if instance.status not in ACTIVE_SLOTS or state is None:
        return
    if state.waiting:
        instance_save_differing(
            instance,
            engine_waiting_since=instance.engine_waiting_since or timezone.now(),
            engine_placed_at=None,
            status_reason=state.error[:1000],
        )
    elif instance.engine_waiting_since is not None and instance.engine_placed_at is None:
        instance.engine_placed_at = timezone.now()
        instance.status_reason = ""
        instance.save(update_fields=["engine_placed_at", "status_reason"])


# The reason a container whose node stopped reporting shows (its instance keeps its state).
SILENT_PREFIX = "no word from its node: "


def _engine_silence_record(
    instance: ContainerInstance, state: ContainerState | None, *, actor: str
) -> bool:
    """A container whose node stopped reporting (``unknown``: a Kubernetes Pod on a lost
    node) is no failure at first, as an unreachable engine is none: its instance keeps
    its state and says why in ``status_reason``. On the locked row; returns True when the
    instance moved.

    1. ``unknown``: record since when (``engine_silent_since``, if not yet) and the
       reason; past ``engine_lost_after`` (``container.engine_lost_after``; empty: never)
       give the instance up (``engine_loss.instance_node_lost``: ``failed``, "engine
       lost: ..."). So ``engine_lost_after`` is the only bound, as for a whole engine.
    2. Anything else the engine says of it (the node reports again): clear both.
    Idempotent: a look that says what the row records writes nothing.
    """
    if state is not None and state.status == "unknown":
        reason = f"{SILENT_PREFIX}{state.error or 'the engine cannot tell its state'}"[:1000]
        instance_save_differing(
            instance,
            engine_silent_since=instance.engine_silent_since or timezone.now(),
            status_reason=reason,
        )
        after = settings.GOBRAVE["container"]["engine_lost_after"]
        return instance_node_lost(
            instance, after=None if after is None else float(after), actor=actor
        )
    if state is not None and (
        instance.status_reason.startswith(SILENT_PREFIX) or instance.engine_silent_since
    ):
        if instance.status_reason.startswith(SILENT_PREFIX):
            instance.status_reason = ""
        instance.engine_silent_since = None
        instance.save(update_fields=["status_reason", "engine_silent_since"])
    return False


def state_apply(
    instance: ContainerInstance,
    state: ContainerState | None,
    *,
    actor: str,
    data: dict[str, Any] | None = None,
) -> bool:
    """Move ``instance`` (locked by the caller, inside its transaction) as ``state`` implies.

    ``state`` is what the engine said (None: the container does not exist). Returns True
    when the instance's state changed; an observation that cannot be applied is recorded
    on the history with the reason (see ``observe.apply_observation``).
    """
    _engine_wait_record(instance, state)
    if _engine_silence_record(instance, state, actor=actor):
        return True
    observation = target_for(
        state, instance.status, memory_limited=bool(instance.spec.get("memory"))
    )
    if observation is None:
        return False
    return apply_observation(instance, observation, actor=actor, data=data)
