"""What the relay is given for each request kind (``register``): its handler, with the
engine's errors mapped onto the relay's (``_translated``), and what shows on the
instance when its request goes dead (``on_dead``) or waits for a retry (``on_retry``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction

from containers.actors import RELAY, WORKER
from containers.engines.base import EngineError, EngineFullError, PermanentEngineError
from containers.engines.calls import engine_ping
from containers.execution.handlers.begin import ENGINE_AWAY_RECHECK_SECONDS
from containers.execution.handlers.control import handle_delete, handle_start, handle_stop
from containers.execution.handlers.create import handle_create
from containers.execution.health import runtime_health_record
from containers.models import ContainerInstance, Runtime
from containers.placement.choice import away_reason
from containers.queues import Queue, RequestKind
from containers.requests.lifecycle import (
    instance_lock,
    instance_notify,
    instance_save,
    move,
    record,
)
from containers.requests.placing import claims_within_capacity
from containers.states import Status, can_move
from outbox import registry
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import Defer, PermanentFailure, Retry, RetryLater
from webhooks.kinds import EventKind

log = logging.getLogger(__name__)


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
