"""The reconciler: compare every instance with its engine and repair what was missed.

contract §5 (and the start_timeout rule of section 4). Events are not lossless (the
engine keeps only its last few hundred, and nothing is heard while the monitor is down),
so ``reconcile()`` runs every ``reconcile_interval``, after every (re)connect of the
monitor's event stream, and on demand (``manage.py reconcile --once``).

Which instances are compared, and how one is compared: ``containers.execution.sync``.

Every transition goes through ``lifecycle.move`` (via ``observe.apply_observation``) on a
row held with ``select_for_update()`` inside ``transaction.atomic()``; engine calls are
made with no transaction open.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from containers.actors import RECONCILER
from containers.engines import engine_for
from containers.engines.base import ContainerState, Engine, EngineError
from containers.engines.calls import ENGINE_CALL_SECONDS
from containers.engines.deadlines import EngineBusy, EngineDeadline, engine_busy
from containers.execution.engine_loss import runtime_engine_lost, runtime_instances_clear_away
from containers.execution.health import runtime_health_record
from containers.execution.reports import PassReport
from containers.execution.sync import (
    WATCHED,
    Sync,
    instance_label,
    instance_sync,
    running_as_recorded,
    stopped_as_recorded,
)
from containers.installation import installation_id
from containers.models import ContainerEvent, ContainerInstance, OrphanContainer, Runtime
from containers.requests.lifecycle import move
from containers.requests.slots import slot_hold
from containers.states import ACTIVE_SLOTS, Status

log = logging.getLogger(__name__)

NIL_UUID = uuid.UUID(int=0)


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


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


@dataclass
class ReconcileReport(PassReport):
    """What one pass did; the command prints it and the monitor logs it."""

    checked: int = 0
    changed: int = 0
    busy: int = 0
    timed_out: int = 0
    lost: int = 0
    orphans_new: int = 0
    orphans_removed: int = 0

    def counts(self) -> str:
        return (
            f"checked {self.checked}, changed {self.changed}, left to workers {self.busy}, "
            f"timed out {self.timed_out}, lost {self.lost}, new orphans {self.orphans_new}, "
            f"orphans removed {self.orphans_removed}"
        )


def _orphan_upsert(
    runtime: Runtime, state: ContainerState, *, now: dt.datetime, why: str
) -> tuple[OrphanContainer, bool]:
    """Insert or refresh the orphan row; on insert also record the sighting, once
    (``why``: what makes it an orphan, for the history)."""
    fields = {
        "name": state.name,
        "labels": state.labels,
        "status": state.status,
        "last_seen_at": now,
    }
    updated = OrphanContainer.objects.filter(runtime=runtime, container_id=state.runtime_id)
    if updated.update(**fields):
        return updated.get(), False
    label = instance_label(state)
    try:
        with transaction.atomic():
            orphan = OrphanContainer.objects.create(
                runtime=runtime, container_id=state.runtime_id, first_seen_at=now, **fields
            )
            ContainerEvent.objects.create(
                instance_id=label or NIL_UUID,
                instance_name=state.name[:128],
                kind="orphan",
                actor=RECONCILER,
                message=(
                    f"container {state.name} ({state.runtime_id[:12]}) on {runtime.name} {why}"
                ),
                data={
                    "runtime": runtime.name,
                    "container_id": state.runtime_id,
                    "status": state.status,
                    "labels": state.labels,
                },
            )
    except IntegrityError:  # another reconciler recorded it first
        return OrphanContainer.objects.get(runtime=runtime, container_id=state.runtime_id), False
    log.warning("orphan container %s (%s) on %s", state.name, state.runtime_id[:12], runtime.name)
    return orphan, True


def orphans_scan(
    *, runtime: Runtime, engine: Engine, installation: str, report: ReconcileReport
) -> None:
    """Report (and under ``orphan_policy: remove``, remove) containers with no instance,
    and remove those their instance gave up.

    1. List every container with our installation label (engine call).
    2. Then read which of their instances exist: a container listed before its instance
       was deleted may be reported once, but one made after the read is never mistaken
       for an orphan. An instance ``failed`` and marked missing (its engine was lost,
       ``engine_loss``, or its container was removed outside gobrave) has given its
       container up: that container is an orphan too, removed whatever the policy (the
       instance says its run ended; the run must not go on unseen). So is one whose
       instance is placed on another engine (a create placed again before its container
       here was recorded): removed whatever the policy while it was never started.
    3. Upsert an ``OrphanContainer`` per orphan; the first sighting adds a ``ContainerEvent``
       (kind ``orphan``, the label's instance id or the nil uuid).
    4. Under ``remove`` (or given up), remove it and set ``removed_at``. Rows of orphans
       no longer listed get ``removed_at`` too (someone removed them).
    """
    policy = _config()["orphan_policy"]
    states = engine.list_ours(installation)
    labelled = {s.runtime_id: instance_label(s) for s in states}
    rows = ContainerInstance.objects.filter(
        id__in=[i for i in labelled.values() if i is not None]
    ).values_list("id", "status", "runtime_missing", "runtime__driver", "runtime__base_url")
    here = engine_key(runtime)
    given_up, elsewhere, known = set(), set(), set()
    for pk, status, missing, driver, url in rows:  # one read of them all
        if status == Status.FAILED and missing:
            given_up.add(pk)
        elif driver is not None and (driver, url) != here:
            elsewhere.add(pk)
        else:
            known.add(pk)
    now = timezone.now()
    listed = []
    for state in states:
        owner = labelled[state.runtime_id]
        if owner in known:
            continue
        listed.append(state.runtime_id)
        gave_up = owner in given_up
        # Left by a create placed again on another engine before this container was
        # recorded: never started by gobrave, so nothing of the user's ran in it.
        left = owner in elsewhere and state.status == "created"
        if gave_up:
            why = f"belongs to instance {owner}, which gave it up (failed, marked missing): removed"
        elif owner in elsewhere:
            why = f"belongs to instance {owner}, placed on another engine since" + (
                ": never started, removed" if left else f" (orphan_policy {policy})"
            )
        else:
            why = f"carries our labels but has no instance (orphan_policy {policy})"
        orphan, new = _orphan_upsert(runtime, state, now=now, why=why)
        report.orphans_new += new
        if policy == "remove" or gave_up or left:
            engine.remove(state.runtime_id)
            OrphanContainer.objects.filter(pk=orphan.pk).update(removed_at=now)
            report.orphans_removed += 1
            log.warning("removed orphan container %s (%s)", state.name, state.runtime_id[:12])
    OrphanContainer.objects.filter(runtime=runtime, removed_at__isnull=True).exclude(
        container_id__in=listed
    ).update(removed_at=now)


#: Stopped instances compared per runtime and pass, besides those the engine lists running.
STOPPED_BATCH = 1000
#: Where each runtime's turn through its stopped instances stands (this process's passes).
_stopped_after: dict[int, uuid.UUID] = {}
# The fields a pass reads to decide whether to look (``instance_sync`` reads the row again).
# What ``running_as_recorded``/``stopped_as_recorded`` read (a deferred field would cost
# a query per instance).
_COMPARED = (
    "id",
    "status",
    "container_id",
    "runtime_node_name",
    "runtime_missing",
    "status_reason",
    "created_at",
)


def _active_rows(runtime: Runtime) -> list[ContainerInstance]:
    """The runtime's watched instances other than ``stopped`` ones, and failed ones with
    a node name to backfill: the status index and the ``instance_failed_unplaced``
    partial index, so the read is bounded by those rows."""
    rows = ContainerInstance.objects.filter(runtime=runtime).filter(
        Q(status__in=WATCHED - {Status.STOPPED})
        | (Q(status=Status.FAILED, runtime_node_name="") & ~Q(container_id=""))
    )
    return list(rows.only(*_COMPARED).order_by("created_at"))


def _has_stopped(runtime: Runtime) -> bool:
    return ContainerInstance.objects.filter(runtime=runtime, status=Status.STOPPED).exists()


def _stopped_rows(
    runtime: Runtime, listed: dict[str, str], *, known, batch: int | None
) -> list[ContainerInstance]:
    """The stopped instances this pass compares.

    1. Those whose container the engine lists running or paused (started outside
       gobrave): looked up by container id among the running containers no active
       instance accounts for (the ``instance_stopped_container`` partial index).
    2. The next ``batch`` after this runtime's turn (by id, over the
       ``instance_stopped_turn`` partial index), wrapping round to the first; the turn
       moves on. With fewer than ``batch`` stopped instances every pass compares all of
       them.
    ``batch`` None: every stopped instance (a pass on demand).
    """
    rows = ContainerInstance.objects.filter(runtime=runtime, status=Status.STOPPED).only(*_COMPARED)
    if batch is None:
        return list(rows.order_by("id"))
    accounted = {i.container_id for i in known}
    awake = [
        cid for cid, st in listed.items() if st in ("running", "paused") and cid not in accounted
    ]
    found = {i.id: i for i in rows.filter(container_id__in=awake)} if awake else {}
    after = _stopped_after.get(runtime.pk)
    turn = list((rows.filter(id__gt=after) if after else rows).order_by("id")[:batch])
    if after and len(turn) < batch:
        turn += rows.filter(id__lte=after).order_by("id")[: batch - len(turn)]
    if turn:
        _stopped_after[runtime.pk] = turn[-1].id
    for instance in turn:
        found.setdefault(instance.id, instance)
    return list(found.values())


def distinct_engines(runtimes: Iterable[Runtime]) -> list[Runtime]:
    """One runtime row per distinct engine (two rows may point at the same daemon)."""
    seen: dict[EngineKey, Runtime] = {}
    for runtime in sorted(runtimes, key=lambda r: r.pk):
        seen.setdefault(engine_key(runtime), runtime)
    return list(seen.values())


EngineKey = tuple[str, str]


def engine_key(runtime: Runtime) -> EngineKey:
    """Which daemon a row points at (rows with the same key share one engine): the key
    of ``distinct_engines``, the monitor's followers, the heartbeat and ``EngineDeadline``."""
    return (runtime.driver, runtime.base_url)


def engine_share(runtime: Runtime, seconds: float) -> EngineDeadline:
    """The runtime's engine for one share of a pass: every call ends within ``seconds``
    of now; raises ``EngineError`` at once when a call of an earlier share still hangs
    there (one waiting thread per engine at most)."""
    key = engine_key(runtime)
    if engine_busy(key):
        raise EngineBusy(
            "the engine has not yet answered a call of an earlier pass "
            f"(over its {seconds:g} s): skipped this pass"
        )
    return EngineDeadline(engine_for(runtime), key=key, seconds=seconds)


def runtime_pass(
    *,
    runtime: Runtime,
    instances: list[ContainerInstance],
    installation: str,
    actor: str,
    seconds: float,
    report: ReconcileReport,
    stopped_batch: int | None = STOPPED_BATCH,
) -> None:
    """Step 1 of ``reconcile`` for one runtime (its active instances, the stopped ones
    the engine lists running and a turn of ``stopped_batch`` others: ``_stopped_rows``),
    its engine calls bounded by ``seconds``
    in all (``EngineDeadline``); the database work runs on the caller's thread. Raises
    ``EngineError`` when the engine does not answer (in time)."""
    engine = engine_share(runtime, seconds)
    # A ping first, bounded on its own too: a silently cut link fails fast.
    engine.check(within=ENGINE_CALL_SECONDS)
    listed = {s.runtime_id: s.status for s in engine.list_ours(installation)}
    instances = instances + _stopped_rows(runtime, listed, known=instances, batch=stopped_batch)
    for instance in instances:
        engine_status = listed.get(instance.container_id, "")
        if running_as_recorded(
            instance, instance.container_id, engine_status
        ) or stopped_as_recorded(instance, instance.container_id, engine_status):
            report.checked += 1
            continue
        outcome = instance_sync(
            instance_id=instance.id,
            actor=actor,
            engine=engine,
            data={"source": "reconcile"},
        )
        report.checked += outcome != Sync.SKIPPED
        report.changed += outcome == Sync.CHANGED
        report.busy += outcome == Sync.BUSY
    runtime_health_record(
        runtime_id=runtime.pk,
        reachable=True,
        node_name=runtime.node_name or engine.node_name(),
        actor=RECONCILER,
    )


def reconcile(
    *,
    runtimes: Iterable[Runtime] | None = None,
    installation: str | None = None,
    actor: str = RECONCILER,
    engine_timeout: float | None = None,
    stopped_batch: int | None = STOPPED_BATCH,
) -> ReconcileReport:
    """One pass over ``runtimes`` (default: all). Must run outside a transaction.

    What a pass reads is bounded by the active instances, not by the table: the
    ``stopped`` ones (most rows of a long-lived installation) are compared
    ``stopped_batch`` at a time, in turn (``_stopped_rows``); ``None`` compares them all
    (``manage.py reconcile --once``).

    Each engine gets at most ``engine_timeout`` seconds (``reconcile_engine_timeout``)
    of engine calls in each of steps 1 and 3 (``EngineDeadline``): one that hangs costs
    the pass that long and no more, and is skipped by later passes until the call left
    waiting there ends. So a pass over N engines takes at most 2 × N × ``engine_timeout``
    plus its database work, whatever the engines do.

    1. Per runtime: ping its engine, list our containers on it (one call), and
       ``instance_sync`` each active watched instance (and failed ones without a node
       name), the stopped ones the list shows running or paused, and the next
       ``stopped_batch`` stopped ones, except one the list shows ``running_as_recorded``
       or ``stopped_as_recorded`` (a look would change nothing); then store the engine's
       health record on the row (``containers.execution.health``) and clear the
       "engine unreachable" reason of its instances, now settled from what the engine
       holds (``engine_loss.runtime_instances_clear_away``). An engine that does not
       answer (in time) is recorded ``unreachable`` with the reason (its instances keep
       their state and show it) and the pass goes on.
    2. Fail instances that held a create/start slot past ``start_timeout`` (neither
       leased nor waiting for a retry: ``instance_fail_stuck``), except on an engine
       this pass found unreachable: those keep their state until it answers.
    3. With ``engine_lost_after`` set: give up on the instances of each engine this pass
       found unreachable that has been so for longer (``engine_loss.runtime_engine_lost``).
    4. Per distinct engine of the enabled runtimes: ``orphans_scan``.
    Idempotent; safe to run while the monitor and workers run.
    """
    installation = installation or installation_id()
    seconds = float(engine_timeout or _config()["reconcile_engine_timeout"])
    rows = list(Runtime.objects.all() if runtimes is None else runtimes)
    report = ReconcileReport()
    unreachable = set()
    for runtime in rows:
        instances = _active_rows(runtime)
        if not instances and not runtime.enabled and not _has_stopped(runtime):
            continue
        # When the engine last answered anyone, read before this pass calls it: a
        # failure here is recorded only if nothing has seen it answer since.
        seen = Runtime.objects.filter(pk=runtime.pk).values_list("last_seen_at", flat=True)
        seen_before = seen.first()
        try:
            runtime_pass(
                runtime=runtime,
                instances=instances,
                installation=installation,
                actor=actor,
                seconds=seconds,
                report=report,
                stopped_batch=stopped_batch,
            )
            runtime_instances_clear_away(runtime_id=runtime.pk)
        except EngineBusy as exc:  # skipped: no call made, nothing new to record
            report.errors.append(f"runtime {runtime.name} ({runtime.base_url}): {exc}")
            unreachable.add(runtime.pk)
        except EngineError as exc:
            message = f"runtime {runtime.name} ({runtime.base_url}) unreachable: {exc}"
            report.errors.append(message)
            unreachable.add(runtime.pk)
            runtime_health_record(
                runtime_id=runtime.pk,
                reachable=False,
                error=str(exc),
                actor=RECONCILER,
                unless_seen_since=(seen_before,),
            )
            log.warning("reconcile: %s", message)
    # An instance on an engine that does not answer keeps its state until the engine
    # answers again (then the pass above settles it): never timed out blind.
    active = (
        ContainerInstance.objects.filter(runtime__in=rows, status__in=ACTIVE_SLOTS)
        .exclude(runtime__in=unreachable)
        .values_list("id", flat=True)
    )
    for instance_id in active:
        report.timed_out += instance_fail_stuck(instance_id=instance_id)
    lost_after = _config()["engine_lost_after"]
    if lost_after is not None:
        for runtime_id in sorted(unreachable):
            report.lost += runtime_engine_lost(
                runtime_id=runtime_id, after=float(lost_after), actor=actor
            )
    for runtime in distinct_engines(r for r in rows if r.enabled):
        if runtime.pk in unreachable:
            continue
        try:
            orphans_scan(
                runtime=runtime,
                engine=engine_share(runtime, seconds),
                installation=installation,
                report=report,
            )
        except EngineError as exc:
            message = f"orphan scan of {runtime.name} failed: {exc}"
            report.errors.append(message)
            log.warning("reconcile: %s", message)
    if (
        report.changed
        or report.timed_out
        or report.lost
        or report.orphans_new
        or report.orphans_removed
    ):
        log.info("reconcile: %s", report)
    return report
