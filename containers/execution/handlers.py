"""Outbox handlers for container requests, registered with the relay at start.

Each handler follows the same steps:
1. Lock the instance and check its state matches the request; if not, the request is
   superseded (a queued create whose instance is now ``delete_pending``). Create and
   start pass the global capacity gate here or ``Defer``.
2. Commit, then call the engine with no transaction open.
3. Lock again, inspect what the engine did and apply it.
Replayed after success, every handler finds the state moved on and changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

from containers.actors import RELAY, WORKER
from containers.engines import engine_for
from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    Engine,
    EngineError,
    EngineFullError,
    Mount,
    PermanentEngineError,
    StaleTaskError,
)
from containers.engines.calls import engine_ping
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from containers.errors import MountRefused
from containers.execution.health import runtime_health_record
from containers.execution.reconciler import engine_key
from containers.execution.sync import state_apply
from containers.execution.workspaces import (
    LABEL_OWNER,
    mounts_check,
    shared_volumes_ensure,
    workspace_ensure,
    workspace_retention_note,
)
from containers.models import ContainerInstance, Runtime
from containers.placement.choice import away_reason
from containers.queues import Queue, RequestKind
from containers.requests.lifecycle import (
    capacity_available,
    container_id_record,
    instance_lock,
    instance_notify,
    instance_save,
    move,
    record,
)
from containers.requests.placing import (
    PLACED_FIELDS,
    claims_within_capacity,
    create_admit,
    engine_waits,
    instance_place_again,
    movable,
    placement_recheck_seconds,
)
from containers.signals import instance_removed
from containers.states import Status, can_move
from outbox import registry
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import Defer, PermanentFailure, Retry, RetryLater
from webhooks.kinds import EventKind

log = logging.getLogger(__name__)


# How soon a request deferred because its engine is unreachable is looked at again (the
# health record changes with each reconcile pass, or when an operator opens the runtime).
ENGINE_AWAY_RECHECK_SECONDS = 5.0


def _engine_away(instance: ContainerInstance) -> str:
    """Why the request must wait ('' if it need not): its engine is recorded unreachable.

    The instance keeps its state; its ``status_reason`` is set to that reason
    (``engine_loss.away_reason``, as every instance there shows; the next transition or
    the reconciler, once the engine answers, clears it). Runs inside ``_begin``'s
    transaction, on the locked row.
    """
    runtime = instance.runtime  # read with the locked row (``instance_lock``)
    if runtime is None or runtime.health != Runtime.Health.UNREACHABLE:  # None: not placed
        return ""
    reason = away_reason(runtime)
    if instance.status_reason != reason:
        instance.status_reason = reason
        instance.save(update_fields=["status_reason"])
    return reason


def _begin(event: OutboxEvent, *, ready: str, doing: str, gated: bool) -> ContainerInstance | None:
    """Step 1: move ``ready → doing`` (or resume ``doing``); None if superseded.

    Gated requests (create, start) pass the capacity gate both times: a request that
    waited for a retry, or whose worker died, held no slot meanwhile (contract §4).
    Under the gate, a create leaving ``pending`` is placed (``placing.create_admit``: the
    global cap and the engine with room the policy picks, in one hold; the placement is
    saved by the move), and a start or a retry must find a slot free on its own engine
    (``placing.engine_waits``); where there is none the instance keeps its state with
    the reason and the request is deferred (no attempt counted).
    A request whose engine is recorded unreachable is deferred before any of this
    (``_engine_away``): no attempt counted, no slot taken, the instance's state kept;
    except a start of an instance marked missing, which fails at once, and a create's
    retry whose container never came to exist (``placing.movable``): that one is placed
    again (``placing.instance_place_again``: its engine if it would take it as a new
    placement, else wherever the normal rule finds room), or waits with the reason.
    """
    waits = ""
    with transaction.atomic():
        # With its runtime: the engine-away check and the engine calls need it.
        instance = instance_lock(event.aggregate_id, with_runtime=True)
        if instance is None:
            return None
        again = gated and instance.status == doing == Status.CREATING and movable(instance)
        away = _engine_away(instance) if instance.status in (ready, doing) and not again else ""
        if away and instance.runtime_missing and instance.status == Status.START_PENDING:
            # Marked missing (given up with its lost engine, or removed outside): a start
            # cannot bring it back, however long it waits (contract §5).
            raise PermanentFailure(f"container {instance.container_name} is missing ({away})")
        if away:
            pass  # the reason commits with this transaction; the request waits (below)
        elif instance.status == ready:
            placing = gated and ready == Status.PENDING
            if placing:
                waits = create_admit(instance)
                if waits is None:
                    raise Defer(f"no create/start slot free for {instance.id}")
            elif gated:
                if not capacity_available():
                    raise Defer(f"no create/start slot free for {instance.id}")
                waits = engine_waits(instance)
            if not waits:
                placed = f"; placed: {instance.placement_reason}" if placing else ""
                move(
                    instance,
                    doing,
                    actor=WORKER,
                    message=f"outbox #{event.id}{placed}",
                    saved=PLACED_FIELDS if placing else (),
                )
        elif instance.status == doing:
            # A retry (or a reclaim) held no slot while it waited; its claim took one, within
            # the cap (the claim guard, ``claims_within_capacity``). It passes the gate again.
            if gated and not capacity_available(exclude=instance.id):
                raise Defer(f"no create/start slot free for {instance.id} (retry)")
            if again:
                waits = instance_place_again(instance)
            else:
                waits = engine_waits(instance) if gated else ""
        else:
            return None
    if away:
        raise Defer(away, delay=ENGINE_AWAY_RECHECK_SECONDS)
    if waits:
        raise Defer(waits, delay=placement_recheck_seconds())
    return instance


_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(ContainerSpec))


def _spec(instance: ContainerInstance) -> ContainerSpec:
    """The runtime's part of the stored spec (with which env keys are secret)."""
    data = {k: v for k, v in instance.spec.items() if k in _SPEC_FIELDS}
    data["mounts"] = [Mount(**m) for m in data.get("mounts", [])]
    return ContainerSpec(**data)


def _ref(instance: ContainerInstance) -> str:
    return instance.container_id or instance.container_name


def _ours(state: ContainerState | None, instance: ContainerInstance) -> bool:
    """Whether the container an engine holds under the instance's name is the instance's
    (it carries its label): anything else holding the name (a foreign object a create
    refused) is never removed."""
    return state is not None and state.labels.get(LABEL_INSTANCE) == str(instance.id)


def _remove_if_ours(engine: Engine, instance: ContainerInstance, ref: str) -> None:
    """Remove the container ``ref`` names (the instance's deterministic name, when no id
    of the engine's was recorded) only if it is the instance's (``_ours``)."""
    if _ours(engine.inspect(ref), instance):
        engine.remove(ref)


def _record_cleanup(instance: ContainerInstance, message: str) -> None:
    record(
        instance,
        kind="cleanup",
        actor=WORKER,
        from_status=instance.status,
        to_status=instance.status,
        message=message,
    )


def _moved_away(locked: ContainerInstance, placed: ContainerInstance) -> tuple[bool, bool]:
    """Whether the instance (``locked``, as it is now) was placed again on another
    runtime since this worker placed it (``placed``: as the worker's ``_begin`` read it):
    a stale worker whose lease lapsed in its engine calls while a retry placed it again
    (``placing.instance_place_again``). And whether this worker's container must then be
    removed: not when the new runtime is a row of the same daemon (``engine_key``), where
    the name ``gb-<uuid>`` makes it the new placement's own container too."""
    if locked.runtime_id == placed.runtime_id:
        return False, False
    current = locked.runtime  # read only here (one query): a move is rare
    shared = current is not None and engine_key(current) == engine_key(placed.runtime)
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
        moved, drop = _moved_away(instance, placed)
        if moved:
            _record_moved(instance, placed, runtime_id, drop)
            abandoned = drop
        else:
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
            changed = tuple(
                name for name, value in seen.items() if getattr(instance, name) != value
            )
            for name in changed:
                setattr(instance, name, seen[name])
            if changed:  # a create's id and host were recorded before its start
                instance_save(instance, changed)
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
        moved, drop = _moved_away(locked, instance)
        if moved:
            _record_moved(locked, instance, runtime_id, drop)
            abandoned = drop
        else:
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


def _prepare(instance: ContainerInstance, engine: Engine) -> None:
    """Before a create or start: the owner's workspace and network exist, and every bind
    source passes the worker's check on this host, now.

    A refused mount is permanent. The relay keeps the whole reason on the outbox row
    (operators: the path and the rule) and hands ``on_dead`` its last line, which is the
    user's text (the template's volume only).
    """
    spec = instance.spec
    workspace_ensure(instance=instance, engine=engine)
    shared_volumes_ensure(instance=instance, engine=engine)
    if spec.get("network_owned"):
        engine.ensure_network(
            spec["network"],
            labels={
                LABEL_INSTALLATION: spec["labels"][LABEL_INSTALLATION],
                LABEL_OWNER: str(instance.owner_id),
            },
        )
    try:
        mounts_check(instance=instance)
    except MountRefused as exc:
        log.warning("%s", exc.operator_message)
        raise PermanentFailure(f"{exc.operator_message}\n{exc.message}") from exc


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


def handle_start(event: OutboxEvent) -> Outcome:
    """Start the instance's container (contract §4) from its stored spec; one the engine
    can no longer start (``StaleTaskError``) fails the start at once, saying so.

    On an engine whose stop removes its object (``stop_removes``: a Kubernetes Pod) a
    stopped instance has none, and the start makes it again from the stored spec;
    elsewhere a missing container is permanent ("removed outside gobrave").
    """
    instance = _begin(event, ready=Status.START_PENDING, doing=Status.STARTING, gated=True)
    if instance is None:
        return Outcome.SUPERSEDED
    engine = engine_for(instance.runtime)
    state = engine.inspect(_ref(instance))
    if state is None and not engine.stop_removes:
        raise PermanentFailure(
            f"container {instance.container_name} is missing (removed outside gobrave)"
        )
    _prepare(instance, engine)
    ref = state.runtime_id if state else instance.container_name
    try:
        started = engine.start(ref, _spec(instance))
    except StaleTaskError as exc:
        # Unlike a create's, this container holds the user's files and logs: it is not
        # replaced, and no retry can start it (the engine keeps the stale task through
        # its own restarts).
        raise PermanentFailure(
            f"{exc}\ncontainer {instance.container_name} can no longer be started: its"
            " engine keeps a stale task for it (a daemon restart cut an earlier start"
            " short); delete the instance and create a new one"
        ) from exc
    if not _apply(instance, engine, ref, Status.STARTING, started):
        return Outcome.SUPERSEDED
    return Outcome.SENT


def handle_stop(event: OutboxEvent) -> Outcome:
    """Stop the instance's container with ``stop_timeout`` and record ``stopped``; on an
    engine whose stop removes its object (``stop_removes``), finding none after it is
    normal, not "missing"."""
    instance = _begin(event, ready=Status.STOP_PENDING, doing=Status.STOPPING, gated=False)
    if instance is None:
        return Outcome.SUPERSEDED
    engine = engine_for(instance.runtime)
    engine.stop(_ref(instance), int(settings.GOBRAVE["container"]["stop_timeout"]))
    state = engine.inspect(_ref(instance))
    with transaction.atomic():
        instance = instance_lock(instance.id)
        if instance is not None and instance.status == Status.STOPPING:
            # On an engine whose stop removes its object, none is what a stop leaves.
            gone = state is None and not engine.stop_removes
            instance.runtime_missing = gone
            instance.save(update_fields=["runtime_missing"])
            exit_code = state.exit_code if state else None
            move(
                instance,
                Status.STOPPED,
                actor=WORKER,
                exit_code=exit_code,
                message="stopped (container was already gone)" if gone else "stopped",
            )
    return Outcome.SENT


def handle_delete(event: OutboxEvent) -> Outcome:
    instance = _begin(event, ready=Status.DELETE_PENDING, doing=Status.DELETING, gated=False)
    if instance is None:
        return Outcome.SUPERSEDED
    if instance.runtime is not None:  # None: never placed, so no container anywhere
        engine = engine_for(instance.runtime)
        if instance.container_id:
            engine.remove(instance.container_id)
        if instance.container_id != instance.container_name:
            # by name: none recorded, or a create that raced us may have adopted it
            _remove_if_ours(engine, instance, instance.container_name)
    with transaction.atomic():
        instance = instance_lock(instance.id)
        if instance is not None and instance.status == Status.DELETING:
            record(
                instance,
                kind="ContainerDeleted",
                actor=WORKER,
                from_status=Status.DELETING,
                message="container removed and instance deleted",
            )
            workspace_retention_note(instance=instance)
            instance_removed.send(sender=ContainerInstance, instance=instance, actor=WORKER)
            instance.delete()
    return Outcome.SENT


# The states in which each request is still the instance's business (ready, doing).
REQUEST_STATES = {
    RequestKind.CREATE: (Status.PENDING, Status.CREATING),
    RequestKind.START: (Status.START_PENDING, Status.STARTING),
    RequestKind.STOP: (Status.STOP_PENDING, Status.STOPPING),
    RequestKind.DELETE: (Status.DELETE_PENDING, Status.DELETING),
}


def on_dead(event: OutboxEvent, reason: str) -> None:
    """A request went dead: fail its instance with the reason, if the request still owns it.

    The reason reads "<request> failed: <why>" (``create failed: cannot pull image ...``),
    the engine's words, never a class name. An instance that has moved on (a delete
    accepted while a create was failing) keeps its state, so the later request still
    runs; the dead letter is recorded, and sent to the ``request.dead`` webhooks, either
    way. Runs in the dead letter's transaction.
    """
    instance = instance_lock(event.aggregate_id)
    if instance is None:
        return
    verb = RequestKind(event.kind).verb
    instance_notify(
        instance, EventKind.REQUEST_DEAD, request=event.id, request_kind=verb, error=reason
    )
    if instance.status not in REQUEST_STATES.get(event.kind, ()) or not can_move(
        instance.status, Status.FAILED
    ):
        record(
            instance,
            kind="dead_letter",
            actor=RELAY,
            from_status=instance.status,
            to_status=instance.status,
            message=f"{verb} request #{event.id} given up: {reason}"[:2000],
        )
        return
    move(
        instance,
        Status.FAILED,
        actor=RELAY,
        kind="dead_letter",
        reason=f"{verb} failed: {reason}"[:2000],
    )


def retrying_reason(retry: Retry) -> str:
    """What an instance says while its request waits for its next attempt:
    "retrying (attempt 3 of 8): <why>, next try in 40 s"."""
    wait = f"{retry.delay:.0f}" if retry.delay >= 10 else f"{retry.delay:.1f}"
    return (
        f"retrying (attempt {retry.attempts} of {retry.max_attempts}): {retry.reason},"
        f" next try in {wait} s"
    )[:2000]


def on_retry(event: OutboxEvent, retry: Retry) -> None:
    """A request failed and will be tried again: say so on its instance (``retrying_reason``)
    and in its history, if the request still owns it (its state is the request's).

    Runs in the retry's transaction (``outbox.registry``), so the reason shows exactly
    while the row waits with that schedule; the instance keeps its state, and the next
    transition replaces the reason.
    """
    instance = instance_lock(event.aggregate_id)
    if instance is None or instance.status not in REQUEST_STATES.get(event.kind, ()):
        return
    reason = retrying_reason(retry)
    instance.status_reason = reason
    instance_save(instance, ("status_reason",))
    record(
        instance,
        kind="retry",
        actor=RELAY,
        from_status=instance.status,
        message=reason,
        data={
            "request": event.id,
            "attempts": retry.attempts,
            "max_attempts": retry.max_attempts,
            "delay": round(retry.delay, 3),
        },
    )
    log.info("instance %s %s request #%s: %s", instance.id, instance.status, event.id, reason)


def _waiting_reason(event: OutboxEvent, reason: str) -> None:
    """Show why a request waits on its instance (the next transition replaces it), if the
    request still owns it."""
    with transaction.atomic():
        instance = instance_lock(event.aggregate_id)
        if instance is not None and instance.status in REQUEST_STATES.get(event.kind, ()):
            instance.status_reason = reason[:1000]
            instance_save(instance, ("status_reason",))


def _engine_silent(event: OutboxEvent) -> str:
    """After a retriable engine error: why the request must wait for its engine, or ''.

    Asks the instance's engine at once (a ping, bounded in time). One
    that answers failed for a reason of its own: '' (the request is retried as usual).
    One that does not is recorded unreachable (its instances then show it) and the
    answer is the reason the instance shows: a loss of contact costs the request no
    attempt, so a long one never turns it into a dead letter. Outside any transaction.
    """
    instance = (
        ContainerInstance.objects.select_related("runtime").filter(id=event.aggregate_id).first()
    )
    if instance is None or instance.runtime is None:
        return ""
    answers, problem = engine_ping(runtime=instance.runtime)
    if answers:
        return ""
    runtime_health_record(
        runtime_id=instance.runtime_id, reachable=False, error=problem, actor=WORKER
    )
    runtime = Runtime.objects.get(pk=instance.runtime_id)
    return away_reason(runtime)


def _translated(handler: Callable[[OutboxEvent], Outcome]) -> Callable[[OutboxEvent], Outcome]:
    """Map the engine's error classes onto the relay's (the relay knows no engine): a
    full engine (``EngineFullError``: a namespace quota) defers the request with the
    reason shown, a permanent error goes dead at once, any other is retried with its
    message as the reason (``RetryLater``, the engine's Retry-After as the backoff's
    floor), unless the engine has gone silent (``_engine_silent``): then the request
    waits for it (``Defer``, no attempt counted), as one that finds its engine
    unreachable before it begins does."""

    def run(event: OutboxEvent) -> Outcome:
        try:
            return handler(event)
        except EngineFullError as exc:  # the engine's own room: wait, no attempt counted
            _waiting_reason(event, f"waiting: {exc}")
            raise Defer(str(exc), delay=exc.retry_after or ENGINE_AWAY_RECHECK_SECONDS) from exc
        except PermanentEngineError as exc:
            raise PermanentFailure(str(exc)) from exc
        except EngineError as exc:
            if away := _engine_silent(event):
                log.warning("outbox #%s %s: waiting, %s (%s)", event.id, event.kind, away, exc)
                raise Defer(away, delay=ENGINE_AWAY_RECHECK_SECONDS) from exc
            raise RetryLater(str(exc), retry_after=exc.retry_after or 0.0) from exc

    run.__name__ = handler.__name__
    return run


HANDLERS: dict[RequestKind, Callable[[OutboxEvent], Outcome]] = {
    RequestKind.CREATE: handle_create,
    RequestKind.START: handle_start,
    RequestKind.STOP: handle_stop,
    RequestKind.DELETE: handle_delete,
}


def register() -> None:
    registry.register_queue(Queue.CREATE, settings.GOBRAVE_CREATE_WORKERS)
    registry.register_queue(Queue.CONTROL, settings.GOBRAVE_CONTROL_WORKERS)
    registry.register_claim_guard(Queue.CREATE, claims_within_capacity)
    for kind, handler in HANDLERS.items():
        registry.register(
            kind,
            queue=kind.queue,
            handler=_translated(handler),
            on_dead=on_dead,
            on_retry=on_retry,
        )
