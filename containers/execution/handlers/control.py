"""The control requests' handlers: start, stop and delete an instance's container."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from containers.actors import WORKER
from containers.engines import engine_for
from containers.engines.base import StaleTaskError
from containers.execution.handlers.apply import _apply
from containers.execution.handlers.begin import _begin
from containers.execution.handlers.container import _prepare, _ref, _remove_if_ours, _spec
from containers.execution.workspaces import workspace_retention_note
from containers.models import ContainerInstance
from containers.requests.lifecycle import instance_lock, move, record
from containers.signals import instance_removed
from containers.states import Status
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import PermanentFailure


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
