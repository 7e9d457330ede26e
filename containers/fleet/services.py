"""Writes on whole engines: cordon, uncordon, decommission (issue 27, item 5), each
recorded in the engine's history (``containers.runtime_history``).

A cordon changes where new work goes (``containers.placement.choice`` skips cordoned
runtimes); a decommission forgets what an engine that is gone for good held, without
ever calling it, so that its ``Runtime`` row can be deleted.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from containers.errors import NotFound
from containers.models import ContainerInstance, Runtime
from containers.queues import Queue
from containers.requests.lifecycle import instance_lock, move, record
from containers.runtime_history import Kind, runtime_event_record
from containers.signals import instance_removed, runtime_decommissioned
from containers.states import Status
from outbox.services import outbox_release_deferred, outbox_supersede_waiting

log = logging.getLogger(__name__)

DECOMMISSIONED = "engine decommissioned"
# The longest reason an operator may give for an action on a runtime (the API and the
# admin cut or refuse longer ones).
REASON_MAX = 500

# A decommission that keeps finding new instances (creates placed before the cordon
# committed) stops after this many rounds; running it again finishes the job.
_ROUNDS = 5


@dataclass(frozen=True)
class DecommissionResult:
    """What ``runtime_decommission`` did: the runtime as it is now, and the instances it
    forgot (ids and names), how many waiting outbox rows it superseded, and what
    others (the DAG runs) reported they ended."""

    runtime: Runtime
    instances: list[tuple[uuid.UUID, str]]
    superseded: int
    others: list[str]


def _locked(runtime_id: int) -> Runtime:
    runtime = Runtime.objects.select_for_update().filter(pk=runtime_id).first()
    if runtime is None:
        raise NotFound(f"no runtime {runtime_id}", runtime=str(runtime_id))
    return runtime


def _set_cordon(*, runtime_id: int, cordoned: bool, actor: str, reason: str) -> Runtime:
    with transaction.atomic():
        runtime = _locked(runtime_id)
        # A decommissioned runtime stays cordoned; checked under the same lock, so a
        # decommission that commits first is never undone.
        if runtime.cordoned == cordoned or runtime.decommissioned_at is not None:
            return runtime
        was = runtime.placement_state
        runtime.cordoned = cordoned
        runtime.cordoned_at = timezone.now() if cordoned else None
        runtime.cordoned_by = actor if cordoned else ""
        runtime.save(update_fields=["cordoned", "cordoned_at", "cordoned_by"])
        runtime_event_record(
            runtime=runtime,
            kind=Kind.CORDONED if cordoned else Kind.UNCORDONED,
            actor=actor,
            message=reason,
            from_status=was,
            to_status=runtime.placement_state,
        )
        if not cordoned:  # creates waiting for an engine with room may go there now
            outbox_release_deferred(queue=Queue.CREATE)
    log.info(
        "runtime %s (%s) %s by %s",
        runtime.pk,
        runtime.name,
        "cordoned" if cordoned else "uncordoned",
        actor,
    )
    return runtime


def runtime_cordon(*, runtime_id: int, actor: str, reason: str = "") -> Runtime:
    """Cordon the runtime: from the commit on, no new create and no new DAG run is placed
    on it; everything on it keeps running, its instances still start, stop and delete
    there, and a DAG run placed on it before goes on there.

    One transaction under the runtime's row lock; idempotent (cordoning a cordoned
    runtime changes nothing, keeps who cordoned it and since when). A change is an entry
    in the runtime's history (``RuntimeEvent``) with ``actor`` and ``reason``, in the same
    transaction. Creates accepted
    before the commit and already placed keep their engine; those still ``pending`` are
    placed elsewhere, or wait. ``NotFound`` for no such runtime.
    """
    return _set_cordon(runtime_id=runtime_id, cordoned=True, actor=actor, reason=reason)


def runtime_uncordon(*, runtime_id: int, actor: str, reason: str = "") -> Runtime:
    """Lift the cordon: the runtime takes new placements again (if ``enabled``).

    One transaction under the runtime's row lock; idempotent; a change is an entry in
    the runtime's history, as for ``runtime_cordon``. A decommissioned runtime
    stays cordoned (its engine is gone): it is returned as it is. ``NotFound`` for no
    such runtime.
    """
    return _set_cordon(runtime_id=runtime_id, cordoned=False, actor=actor, reason=reason)


def _forget(
    instance_id: uuid.UUID, *, actor: str, runtime_id: int, runtime_name: str
) -> tuple[str, int] | None:
    """Take one instance of a decommissioned engine through ``delete_pending`` →
    ``deleting`` → deleted, with its history, and supersede its waiting requests. One
    transaction under the instance's row lock; None if it is gone or moved elsewhere."""
    message = f"{DECOMMISSIONED}: runtime {runtime_name}"
    with transaction.atomic():
        instance = instance_lock(instance_id)
        if instance is None or instance.runtime_id != runtime_id:
            return None
        if instance.status not in (Status.DELETE_PENDING, Status.DELETING):
            move(instance, Status.DELETE_PENDING, actor=actor, kind="decommission", message=message)
        if instance.status == Status.DELETE_PENDING:
            move(instance, Status.DELETING, actor=actor, kind="decommission", message=message)
        record(
            instance,
            kind="ContainerDeleted",
            actor=actor,
            from_status=Status.DELETING,
            message=f"{message}: instance deleted without calling the engine",
            data={"container_id": instance.container_id, "container": instance.container_name},
        )
        superseded = outbox_supersede_waiting(aggregate_id=str(instance.id), reason=message)
        instance_removed.send(sender=ContainerInstance, instance=instance, actor=actor)
        name = instance.name
        instance.delete()
    return name, superseded


def runtime_decommission(*, runtime_id: int, actor: str, reason: str = "") -> DecommissionResult:
    """Forget everything gobrave placed on an engine that is gone for good, without any
    call to that engine, so that its ``Runtime`` row can then be deleted.

    Must run outside a transaction (each step commits on its own). Steps:
    1. Under the runtime's row lock: cordon it and switch it off (``enabled``), so that
       nothing new is placed there from the commit on (a DAG run's next node included).
    2. In the same transaction, send ``runtime_decommissioned``: the DAG runs placed
       there end ``failed`` with the reason "engine decommissioned" and let go of the
       runtime, so their runner never calls that engine (first, so that no node is
       failed for "its instance vanished" by an advance that runs between the steps).
    3. Each instance on it, in a transaction of its own under its row lock:
       ``delete_pending`` → ``deleting`` → deleted (from any state), each move in its
       history with the reason "engine decommissioned" (the history outlives the row);
       its waiting outbox rows end ``sent``/``superseded`` (``outbox_supersede_waiting``;
       a row a worker holds is superseded by its handler, which finds no instance).
       Repeated until none is left (a create placed before step 1's commit), at most a
       few rounds.
    4. Record ``decommissioned_at``: the runtime row may now be deleted.
    Steps 1 and 4 each write an entry in the runtime's history (``RuntimeEvent``:
    ``engine.decommissioning`` with ``reason``, then ``engine.decommissioned`` with what
    was forgotten) in their own transaction; the history outlives the row.
    Idempotent: a second call finds nothing left and changes nothing but the time.
    ``NotFound`` for no such runtime.
    """
    with transaction.atomic():
        runtime = _locked(runtime_id)
        now = timezone.now()
        was = runtime.placement_state
        if not runtime.cordoned:
            runtime.cordoned, runtime.cordoned_at, runtime.cordoned_by = True, now, actor
        runtime.enabled = False
        runtime.save(update_fields=["cordoned", "cordoned_at", "cordoned_by", "enabled"])
        runtime_event_record(
            runtime=runtime,
            kind=Kind.DECOMMISSIONING,
            actor=actor,
            message=f"{DECOMMISSIONED}: cordoned and disabled, forgetting what it held"
            + (f": {reason}" if reason else ""),
            from_status=was,
            to_status=runtime.placement_state,
        )
        answers = runtime_decommissioned.send(
            sender=Runtime, runtime=runtime, reason=DECOMMISSIONED, actor=actor
        )
    log.info("runtime %s (%s): decommission by %s", runtime.pk, runtime.name, actor)
    others = [line for _, lines in answers for line in (lines or [])]
    forgotten: list[tuple[uuid.UUID, str]] = []
    superseded = 0
    for _ in range(_ROUNDS):
        ids = list(
            ContainerInstance.objects.filter(runtime_id=runtime.pk)
            .order_by("created_at")
            .values_list("id", flat=True)
        )
        if not ids:
            break
        for instance_id in ids:
            done = _forget(
                instance_id, actor=actor, runtime_id=runtime.pk, runtime_name=runtime.name
            )
            if done is not None:
                forgotten.append((instance_id, done[0]))
                superseded += done[1]
    with transaction.atomic():
        runtime = _locked(runtime_id)
        was = runtime.placement_state
        runtime.decommissioned_at = timezone.now()
        runtime.save(update_fields=["decommissioned_at"])
        runtime_event_record(
            runtime=runtime,
            kind=Kind.DECOMMISSIONED,
            actor=actor,
            message=f"{DECOMMISSIONED}: {len(forgotten)} instances forgotten, "
            f"{superseded} requests superseded",
            from_status=was,
            to_status=runtime.placement_state,
            data={
                "instances": len(forgotten),
                # the first ones (each instance's own history says it too)
                "instance_ids": [str(instance_id) for instance_id, _ in forgotten[:100]],
                "superseded": superseded,
                "others": others[:100],
            },
        )
    log.info(
        "runtime %s (%s) decommissioned by %s: %s instances forgotten, %s requests superseded, %s",
        runtime.pk,
        runtime.name,
        actor,
        len(forgotten),
        superseded,
        "; ".join(others) or "nothing else placed there",
    )
    return DecommissionResult(
        runtime=runtime, instances=forgotten, superseded=superseded, others=others
    )
