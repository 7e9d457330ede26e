"""What becomes of the instances on an engine that stops answering (contract §9, health).

A loss of contact is not a verdict on the containers: a cut link, a rebooting host or a
restarting daemon usually gives them all back. So, in three steps:

1. **While the engine is away** its instances keep their state and say why: their
   ``status_reason`` reads "engine unreachable since <when> (runtime <name>: <why>)"
   (``away_reason``), written by ``runtime_instances_mark_away`` whenever the engine is
   recorded unreachable (``health.runtime_health_record``), with one history entry per
   instance when the mark is new. Nothing fails, stops or moves them for it: the workers
   defer their requests (``handlers``: no attempt counted), the reconciler neither times
   them out nor reads a silent engine as an empty one.
2. **When it answers again** the reconciler settles every instance there from what the
   engine holds (adopting the containers that outlived the loss: they carry the
   instances' deterministic names) and then clears the mark
   (``runtime_instances_clear_away``).
3. **Past ``engine_lost_after``** (``container.engine_lost_after``; empty, the default:
   never), an engine the reconciler still finds silent is given up
   (``runtime_engine_lost``): its instances that are running or under way become
   ``failed`` with the reason "engine lost", and are marked missing (their containers
   are given up: one that turns up later is removed by the reconciler's orphan scan);
   stopped ones stay ``stopped``, marked missing (contract §5: a later start fails with
   that reason, unless the container comes back with its engine, which clears the
   mark). Instances waiting for a create (``pending``: placement's business) or being
   deleted (``delete_pending``, ``deleting``: they wait for the engine or its
   decommission) are left as they are.

A node that stops reporting while the engine itself answers (a Kubernetes Pod
``Unknown``: the API server is up, the kubelet silent) is the same loss for the
instances on that node, one instance at a time: each keeps its state and says "no word
from its node: ..." (``sync``, which records since when in ``engine_silent_since``) and,
past ``engine_lost_after``, is given up at the next look (the reconciler's, or the
monitor's) by the same rules (``instance_node_lost``).
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from containers.actors import RECONCILER
from containers.models import ContainerEvent, ContainerInstance, Runtime
from containers.placement.choice import UNREACHABLE_SINCE, away_reason
from containers.queues import Queue
from containers.requests.lifecycle import instance_lock, instance_save, move, record
from containers.requests.placing import movable
from containers.states import Status
from outbox.services import outbox_make_due

log = logging.getLogger(__name__)

ENGINE_LOST = "engine lost"
# Instances that keep their state, with the reason, while their engine is away.
KEPT_WHILE_AWAY = frozenset(Status) - {Status.PENDING, Status.FAILED}
# Past engine_lost_after: these fail ("engine lost"); stopped ones are marked missing.
LOST_FAIL = frozenset(
    {
        Status.CREATING,
        Status.RUNNING,
        Status.PAUSED,
        Status.START_PENDING,
        Status.STARTING,
        Status.STOP_PENDING,
        Status.STOPPING,
    }
)


def _note(rows: list[tuple], *, kind: str, message: str) -> None:
    """One history entry per ``(id, name, status)``, state kept."""
    ContainerEvent.objects.bulk_create(
        ContainerEvent(
            instance_id=instance_id,
            instance_name=name,
            kind=kind,
            from_status=status,
            to_status=status,
            message=message,
            actor=RECONCILER,
        )
        for instance_id, name, status in rows
    )


def runtime_creates_wake(*, runtime_id: int) -> int:
    """The engine went away: creates placed there whose container never came to exist
    (``creating`` with no container id), waiting on a retry's backoff, are made due now,
    so that each is placed again on an engine that answers (``placing.movable``) instead
    of waiting out its backoff for an engine that is gone. Returns how many rows."""
    ids = ContainerInstance.objects.filter(
        runtime_id=runtime_id, status=Status.CREATING, container_id=""
    ).values_list("id", flat=True)
    return outbox_make_due(aggregate_ids=[str(i) for i in ids], queue=Queue.CREATE)


def runtime_instances_mark_away(*, runtime_id: int) -> int:
    """Give every instance on the runtime that keeps its state while away
    (``KEPT_WHILE_AWAY``) the reason ``away_reason``; returns how many changed.

    Does nothing unless the runtime is recorded unreachable now. One transaction; rows
    another transaction holds are skipped (``SKIP LOCKED``: a request or a move is at
    work on them, and the next record marks them). Instances newly marked get a history
    entry (kind ``engine_unreachable``); a reason already saying "engine unreachable" is
    only brought up to date. Idempotent.
    """
    runtime = Runtime.objects.filter(pk=runtime_id, health=Runtime.Health.UNREACHABLE).first()
    if runtime is None:
        return 0
    reason = away_reason(runtime)
    with transaction.atomic():
        rows = list(
            ContainerInstance.objects.select_for_update(skip_locked=True)
            .filter(runtime_id=runtime_id, status__in=KEPT_WHILE_AWAY)
            .exclude(status_reason=reason)
            .order_by("id")
            .values_list("id", "name", "status", "status_reason")
        )
        if not rows:
            return 0
        ContainerInstance.objects.filter(id__in=[row[0] for row in rows]).update(
            status_reason=reason
        )
        new = [row[:3] for row in rows if not row[3].startswith(UNREACHABLE_SINCE)]
        _note(new, kind="engine_unreachable", message=f"{reason}; state kept")
    if new:
        log.warning(
            "runtime %s unreachable: %d instance(s) keep their state", runtime.name, len(new)
        )
    return len(rows)


def runtime_instances_clear_away(*, runtime_id: int) -> int:
    """Clear the "engine unreachable" reason of the instances on the runtime, once the
    reconciler has settled them from what the engine holds; returns how many.

    Run by the reconciler after a pass over a runtime whose engine answered. One
    transaction, rows others hold skipped (their move replaces the reason anyway, or the
    next pass clears it); one history entry each (kind ``engine_reachable``). Idempotent.
    """
    with transaction.atomic():
        rows = list(
            ContainerInstance.objects.select_for_update(skip_locked=True)
            .filter(runtime_id=runtime_id, status_reason__startswith=UNREACHABLE_SINCE)
            .order_by("id")
            .values_list("id", "name", "status")
        )
        if not rows:
            return 0
        ContainerInstance.objects.filter(id__in=[row[0] for row in rows]).update(status_reason="")
        _note(rows, kind="engine_reachable", message="engine answers again; settled from it")
    return len(rows)


def _lost_runtime(runtime_id: int, after: float) -> Runtime | None:
    """The runtime if it is recorded unreachable since ``after`` seconds or more (on the
    database's clock), else None."""
    cutoff = Now() - dt.timedelta(seconds=after)
    return Runtime.objects.filter(
        pk=runtime_id, health=Runtime.Health.UNREACHABLE, health_since__lte=cutoff
    ).first()


def runtime_engine_lost(*, runtime_id: int, after: float, actor: str = RECONCILER) -> int:
    """Give up on the instances of a runtime unreachable for ``after`` seconds or more;
    returns how many changed.

    The caller (the reconciler, the heartbeat) has just found the engine silent. Per instance,
    in a transaction of its own, on its locked row, with the runtime's record read again
    (an engine that answered meanwhile stops it):
    1. ``LOST_FAIL`` states: marked missing and moved to ``failed``, reason "engine lost:
       ..." (kind ``engine_lost``): its slot, if any, frees; its waiting requests find it
       moved on and end superseded.
    2. ``stopped`` and not yet missing: marked missing, state kept, with a history entry.
    A create whose container never came to exist (``placing.movable``) is not given up:
    its create's retry places it again on an engine that answers (or it waits, saying
    why). Idempotent: instances already given up are not touched again.
    """
    if _lost_runtime(runtime_id, after) is None:
        return 0
    candidates = ContainerInstance.objects.filter(runtime_id=runtime_id).filter(
        Q(status__in=LOST_FAIL) | Q(status=Status.STOPPED, runtime_missing=False)
    )
    changed = 0
    for instance_id in candidates.order_by("created_at").values_list("id", flat=True):
        with transaction.atomic():
            runtime = _lost_runtime(runtime_id, after)
            if runtime is None:
                break
            since = runtime.health_since.isoformat(timespec="seconds")
            reason = (
                f"{ENGINE_LOST}: runtime {runtime.name} unreachable since {since}, longer "
                f"than engine_lost_after ({after:g} s)"
            )
            instance = instance_lock(instance_id)
            if instance is None or instance.runtime_id != runtime_id:
                continue
            if movable(instance):  # its container never existed: its create places it again
                continue
            if instance.status in LOST_FAIL:
                _give_up(instance, actor=actor, reason=reason)
            elif instance.status == Status.STOPPED and not instance.runtime_missing:
                instance.runtime_missing = True
                instance_save(instance, ("runtime_missing",))
                record(
                    instance,
                    kind="engine_lost",
                    actor=actor,
                    from_status=instance.status,
                    to_status=instance.status,
                    message=f"{reason}; kept stopped, marked missing",
                )
            else:
                continue
            changed += 1
    if changed:
        log.warning("runtime %s: engine lost, %d instance(s) given up", runtime_id, changed)
    return changed


def _give_up(instance: ContainerInstance, *, actor: str, reason: str) -> None:
    """A ``LOST_FAIL`` instance of a lost engine or node (its row locked): marked missing
    and moved to ``failed`` with ``reason`` (kind ``engine_lost``)."""
    instance.runtime_missing = True
    instance_save(instance, ("runtime_missing",))
    move(instance, Status.FAILED, actor=actor, kind="engine_lost", reason=reason)


def instance_node_lost(
    instance: ContainerInstance, *, after: float | None, actor: str = RECONCILER
) -> bool:
    """Give up on an instance whose node has been silent (``engine_silent_since``) for
    ``after`` seconds or more (``engine_lost_after``; None: never); returns True when it
    moved.

    On the caller's locked row (``sync.state_apply``), inside its transaction, on the app's
    clock (``engine_silent_since`` is written with it). By ``runtime_engine_lost``'s rules:
    a ``LOST_FAIL`` instance is marked missing and moved to ``failed``, reason "engine
    lost: ...", kind ``engine_lost`` (its slot frees; the orphan scan removes the Pod it
    gave up). Any other state is left as it is (a stopped instance has no container
    on an engine whose stop removes it; a delete waits for its engine). Idempotent: a
    failed instance is not in ``LOST_FAIL``.
    """
    since = instance.engine_silent_since
    if after is None or since is None or instance.status not in LOST_FAIL:
        return False
    if timezone.now() - since < dt.timedelta(seconds=after):
        return False
    node = instance.runtime_node_name or "(unknown)"
    reason = (
        f"{ENGINE_LOST}: no word from its node {node} since "
        f"{since.isoformat(timespec='seconds')}, longer than engine_lost_after ({after:g} s)"
    )
    _give_up(instance, actor=actor, reason=reason)
    log.warning("instance %s: its node %s is lost, given up", instance.id, node)
    return True
