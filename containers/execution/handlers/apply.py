"""Step 3 of a create or start (``_apply``: what the engine says now, applied), and what
a worker says on the history of the clean-ups it does: a container of an instance that
failed meanwhile, or of one placed again on another engine (``_moved_away``)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from containers.actors import WORKER
from containers.engines.base import ContainerState, Engine
from containers.execution.reconciler import engine_key
from containers.execution.sync import state_apply
from containers.models import ContainerInstance
from containers.requests.lifecycle import instance_lock, instance_save_differing, record
from containers.states import Status

log = logging.getLogger(__name__)


def _record_cleanup(instance: ContainerInstance, message: str) -> None:
    record(
        instance,
        kind="cleanup",
        actor=WORKER,
        from_status=instance.status,
        to_status=instance.status,
        message=message,
    )


def _moved_away(
    locked: ContainerInstance, placed: ContainerInstance, ref: str
) -> tuple[bool, bool]:
    """Whether the instance (``locked``, as it is now) was placed again on another
    runtime since this worker placed it (``placed``: as the worker's ``_begin`` read it):
    a stale worker whose lease lapsed in its engine calls while a retry placed it again
    (``placing.instance_place_again``). And whether this worker's container (``ref``)
    must then be removed: not when the new runtime is a row of the same daemon
    (``engine_key``), where the name ``gb-<uuid>`` makes it the new placement's own
    container too. A move found is said on the history at once (``_record_moved``).
    The caller holds the row (``instance_lock``)."""
    if locked.runtime_id == placed.runtime_id:
        return False, False
    current = locked.runtime  # read only here (one query): a move is rare
    shared = current is not None and engine_key(current) == engine_key(placed.runtime)
    _record_moved(locked, placed, ref, drop=not shared)
    return True, not shared


def _record_moved(
    locked: ContainerInstance, placed: ContainerInstance, ref: str, drop: bool
) -> None:
    """Say on the instance's history (and in the log) what a stale worker does with the
    container it made on the engine the instance was placed on before (``_moved_away``):
    removes it (``drop``) or leaves it to the new placement (the same daemon)."""
    now_on = locked.runtime.name if locked.runtime is not None else "no engine"
    what = "removing" if drop else "leaving (the same daemon)"
    _record_cleanup(
        locked,
        f"{what} container {ref[:12]} on {placed.runtime.name}: the instance was placed"
        f" again on {now_on} meanwhile; this attempt is superseded",
    )
    log.info(
        "instance %s %s: stale create on %s superseded (now on %s), container %s %s",
        locked.id,
        locked.status,
        placed.runtime.name,
        now_on,
        ref[:12],
        "removed" if drop else "left",
    )


def _apply(
    instance: ContainerInstance,
    engine: Engine,
    runtime_id: str,
    doing: str,
    started: ContainerState | None = None,
) -> bool:
    """Step 3: record the engine id and apply what the engine says now; False when the
    request is superseded (the instance was placed again elsewhere meanwhile). What the
    engine says is ``started`` when its ``start`` answered with the container's state
    (a Kubernetes Pod as made), else one inspect.

    If the reconciler failed the instance meanwhile (start_timeout), undo what this
    worker did, after the transaction: a create removes its container, a start stops it
    (the container was the user's before the start). An instance failed by its
    container's own exit (an exit code recorded: a stale worker whose lease lapsed while
    another finished the create) keeps its container, with the user's exit and logs.
    An instance now placed on another runtime (``_moved_away``) is not this engine's:
    nothing is recorded and the container is undone the same way (unless the new
    runtime is the same daemon), and the request is superseded.
    """
    state = started if started is not None else engine.inspect(runtime_id)
    node = engine.node_name() if state else ""
    placed = instance
    with transaction.atomic():
        instance = instance_lock(placed.id)
        if instance is None:
            return True
        moved, abandoned = _moved_away(instance, placed, runtime_id)
        if not moved:
            seen = {
                "container_id": runtime_id,
                "runtime_node_name": (state.node_name if state else "") or node,
                "runtime_missing": state is None,
            }
            if state is not None and not seen["runtime_node_name"]:
                # A container with no node yet (a Pod as its create answered, not yet
                # scheduled) says nothing of it: the node the monitor may have recorded
                # meanwhile (the Pod ran before this look) stays.
                del seen["runtime_node_name"]
            # (A create's id and host were recorded before its start: usually no change.)
            instance_save_differing(instance, **seen)
            abandoned = instance.status == Status.FAILED and instance.exit_code is None
            if instance.status == doing:
                state_apply(instance, state, actor=WORKER)
            elif abandoned:
                undo = "removing" if doing == Status.CREATING else "stopping"
                _record_cleanup(instance, f"{undo} the container: the instance failed meanwhile")
    if abandoned and doing == Status.CREATING:
        engine.remove(runtime_id)
    elif abandoned:
        engine.stop(runtime_id, int(settings.GOBRAVE["container"]["stop_timeout"]))
    return not moved
