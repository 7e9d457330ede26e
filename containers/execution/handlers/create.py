"""The create request's handler (``handle_create``) and its own steps: recording the
engine's id before the start, replacing a container the engine can no longer start, and
removing what an abandoned create left unstarted."""

from __future__ import annotations

from django.db import transaction

from containers.engines import engine_for
from containers.engines.base import ContainerSpec, Engine, StaleTaskError
from containers.execution.handlers.apply import _apply, _moved_away, _record_cleanup
from containers.execution.handlers.begin import _begin
from containers.execution.handlers.container import _ours, _prepare, _spec
from containers.models import ContainerInstance
from containers.requests.lifecycle import container_id_record, instance_lock
from containers.states import Status
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome


def handle_create(event: OutboxEvent) -> Outcome:
    """Create and start the instance's container (contract §4).

    1. ``_begin``: ``pending → creating`` past the capacity gate (a retry resumes
       ``creating``); a create whose instance moved on removes what an earlier attempt
       left unstarted (``_remove_abandoned``) and is superseded.
    2. Create ``gb-<uuid>``: the name is the key, so a retried create adopts the
       container an earlier attempt made and never makes a second one.
    3. Record the engine's id at once (``_record_created``), so the instance shows the
       container the engine holds before it started; an instance that moved on meanwhile
       (failed by the reconciler: its container is removed; a delete accepted; placed
       again on another engine by a retry while this worker's lease had lapsed: its
       container here is removed) is not started, and the create is superseded.
    4. Start it; a container the engine can no longer start (``StaleTaskError``: a
       daemon restart cut an earlier start short) is replaced once, in this attempt
       (``_replace_stale``). Then apply what the engine says (``_apply``).
    """
    instance = _begin(event, ready=Status.PENDING, doing=Status.CREATING, gated=True)
    if instance is None:
        _remove_abandoned(event.aggregate_id)
        return Outcome.SUPERSEDED
    engine = engine_for(instance.runtime)
    _prepare(instance, engine)
    spec = _spec(instance)
    runtime_id = engine.create(spec)
    if not _record_created(instance, engine, runtime_id):
        return Outcome.SUPERSEDED
    started = None
    try:
        started = engine.start(runtime_id, spec)
    except StaleTaskError as exc:
        runtime_id = _replace_stale(instance, engine, spec, runtime_id, exc)
        if not runtime_id:
            return Outcome.SUPERSEDED
    if not _apply(instance, engine, runtime_id, Status.CREATING, started):
        return Outcome.SUPERSEDED
    return Outcome.SENT


def _replace_stale(
    instance: ContainerInstance,
    engine: Engine,
    spec: ContainerSpec,
    runtime_id: str,
    stale: StaleTaskError,
) -> str:
    """Step 4 of a create whose container the engine can no longer start: make a new one.

    1. The instance is still ``creating``: no run of this container was ever the user's
       result, so whatever the engine says of it (``created``, or ``exited`` where the
       cut start got as far as running it) it is replaced. One the engine now says is
       running is kept (the start is done); one it no longer knows raises ``stale``
       again (retried as usual).
    2. Record why on the instance's history, then force-remove the container.
    3. Create ``gb-<uuid>`` again (the name is the key: one container, never two), record
       its id (``_record_created``) and start it. A second ``StaleTaskError`` is left to
       the relay's retry.
    Returns the new container's id, or "" when the instance moved on meanwhile. Runs
    outside any transaction.
    """
    state = engine.inspect(runtime_id)
    if state is None:
        raise stale
    if state.status == "running":
        return runtime_id
    with transaction.atomic():
        locked = instance_lock(instance.id)
        if locked is None:
            return ""
        _record_cleanup(
            locked,
            f"replacing container {runtime_id[:12]}: the engine can no longer start it"
            f" (a daemon restart cut an earlier start short): {stale}"[:1000],
        )
    engine.remove(runtime_id)
    runtime_id = engine.create(spec)
    if not _record_created(instance, engine, runtime_id):
        return ""
    engine.start(runtime_id, spec)
    return runtime_id


def _record_created(instance: ContainerInstance, engine: Engine, runtime_id: str) -> bool:
    """Step 3 of a create: record the engine's id in a short transaction of its own.

    Returns True when the create goes on to start the container. The id is recorded
    whatever the state, so the instance shows the container the engine holds; an
    instance no longer ``creating`` is not started: one the reconciler failed meanwhile
    (``start_timeout``) has its container removed, after the transaction (and its id
    cleared); one with a delete accepted leaves it to that delete. An instance placed
    again on another runtime meanwhile (``_moved_away``: this worker's lease lapsed in
    its engine calls and a retry moved it) records nothing: its container on this
    engine is removed (unless the new runtime is the same daemon) and the create is
    superseded, so one instance never has a container started on two engines.
    Idempotent: a retry that adopted the same container records the same id.

    The common case, an instance still ``creating`` where this worker placed it, is one
    statement (the row's lock for its length, its own commit); anything else takes the
    transaction below.
    """
    node = engine.node_name()
    if container_id_record(
        instance_id=instance.id,
        placed_on=instance.runtime_id,
        runtime_id=runtime_id,
        node=node,
        status=Status.CREATING,
    ):
        return True
    with transaction.atomic():
        locked = instance_lock(instance.id)
        if locked is None:
            return False
        moved, abandoned = _moved_away(locked, instance, runtime_id)
        if not moved:
            abandoned = locked.status == Status.FAILED
            recorded = "" if abandoned else runtime_id
            if locked.container_id != recorded:
                locked.container_id = recorded
                locked.save(update_fields=["container_id"])
            if abandoned:
                _record_cleanup(locked, "removing the container: the instance failed meanwhile")
        going_on = not moved and locked.status == Status.CREATING
    if abandoned:
        engine.remove(runtime_id)
    return going_on


def _remove_abandoned(instance_id: str) -> None:
    """A create found its instance failed before the create finished (the reconciler
    gave up on it after a worker died mid-create): remove what that worker left.

    The deterministic name is the key, whether or not the id was recorded: the container
    ``gb-<uuid>`` is removed if it never started (the engine says ``created``): nothing
    of the user's ever ran in it. One that did start stays with the failed instance (its
    exit and logs are the user's); so does an instance whose container is gone. The
    recorded id is cleared with the removal, so the instance shows no container.
    """
    instance = ContainerInstance.objects.filter(id=instance_id).first()
    if (
        instance is None
        or instance.status != Status.FAILED
        or instance.runtime_id is None
        or instance.runtime_missing
    ):
        return  # (failed and missing: its engine was lost; the orphan scan removes it)
    engine = engine_for(instance.runtime)
    state = engine.inspect(instance.container_name)
    if not _ours(state, instance) or state.status != "created":
        return
    engine.remove(instance.container_name)
    with transaction.atomic():
        locked = instance_lock(instance_id)
        if locked is not None:
            if locked.container_id:
                locked.container_id = ""
                locked.save(update_fields=["container_id"])
            _record_cleanup(locked, "removed the container a failed create had left unstarted")
