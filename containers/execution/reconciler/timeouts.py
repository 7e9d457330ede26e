"""Instances failed for waiting too long: ``start_timeout`` (a create/start slot held)
and ``unschedulable_timeout`` (the engine holding it waiting for room) (step 2)."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from containers.actors import RECONCILER
from containers.execution.reconciler.config import _config
from containers.models import ContainerInstance
from containers.requests.lifecycle import move
from containers.requests.slots import slot_hold
from containers.states import ACTIVE_SLOTS, Status


def instance_fail_stuck(*, instance_id: uuid.UUID | str) -> bool:
    """Fail an instance that has held a create/start slot past ``start_timeout``.

    An instance its engine holds waiting for room of its own is judged by
    ``unschedulable_timeout`` instead (``_fail_waited_too_long``); once the engine found
    it room (``engine_placed_at``) ``start_timeout`` runs again, the time it waited not
    counted (``_waited``). Slot-holding time only (``containers.requests.slots``), on
    the database's clock: never while a worker holds its request under a live lease
    (the worker is still in its runtime calls and will apply what it finds), nor while
    the request waits for a retry (``max_attempts`` bounds that). Locks the instance
    row, moves it to ``failed`` with
    the reason (which frees its slot and wakes deferred creates), and returns True; a
    worker that later finds it failed removes what it created. Idempotent: an instance
    that moved on is left alone.
    """
    timeout = float(_config()["start_timeout"])
    with transaction.atomic():
        instance = ContainerInstance.objects.select_for_update().filter(id=instance_id).first()
        if instance is None or instance.status not in ACTIVE_SLOTS:
            return False
        if instance.engine_waiting_since is not None and instance.engine_placed_at is None:
            return _fail_waited_too_long(instance)
        hold = slot_hold(instance_id=instance.id)
        if not hold.held or hold.leased or hold.seconds is None:
            return False
        waited = _waited(instance)
        seconds = hold.seconds - waited
        if seconds < timeout:
            return False
        besides = f", not counting {waited:.0f}s waiting for room on the engine" if waited else ""
        move(
            instance,
            Status.FAILED,
            actor=RECONCILER,
            kind="start_timeout",
            reason=(
                f"start_timeout: still {instance.status} after holding its slot for "
                f"{seconds:.0f}s{besides} (limit {timeout:g}s) and no worker holds its request"
            ),
        )
        return True


def _waited(instance: ContainerInstance) -> float:
    """Seconds the engine made the instance wait for room of its own before it found it
    some (``engine_waiting_since`` to ``engine_placed_at``, the app's clock); 0 if it
    never waited in this state."""
    if instance.engine_waiting_since is None or instance.engine_placed_at is None:
        return 0.0
    return max(0.0, (instance.engine_placed_at - instance.engine_waiting_since).total_seconds())


def _fail_waited_too_long(instance: ContainerInstance) -> bool:
    """An instance the engine holds waiting for room of its own (a Pod waiting for a
    node): ``start_timeout`` does not run; ``unschedulable_timeout`` (empty: never), on
    the app's clock from ``engine_waiting_since``, fails it. Inside the caller's
    transaction, on the locked row."""
    limit = _config().get("unschedulable_timeout")
    if limit is None or instance.engine_waiting_since is None:
        return False
    waited = (timezone.now() - instance.engine_waiting_since).total_seconds()
    if waited < float(limit):
        return False
    move(
        instance,
        Status.FAILED,
        actor=RECONCILER,
        kind="unschedulable_timeout",
        reason=(
            f"unschedulable_timeout: waited {waited:.0f}s for room on the engine (limit"
            f" {float(limit):g}s): {instance.status_reason}"
        )[:2000],
    )
    return True
