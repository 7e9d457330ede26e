"""Step 1 of every handler: lock the instance, check its state matches the request,
pass the capacity gate (create, start) or wait for an engine recorded unreachable."""

from __future__ import annotations

from django.db import transaction

from containers.actors import WORKER
from containers.models import ContainerInstance, Runtime
from containers.placement.choice import away_reason
from containers.requests.lifecycle import capacity_available, instance_lock, move
from containers.requests.placing import (
    PLACED_FIELDS,
    create_admit,
    engine_waits,
    instance_place_again,
    movable,
    placement_recheck_seconds,
)
from containers.states import Status
from outbox.models import OutboxEvent
from outbox.registry import Defer, PermanentFailure

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
