"""A pass: one runtime's share (``runtime_pass``, step 1) and the whole pass (``reconcile``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from containers.actors import RECONCILER
from containers.engines.base import EngineError
from containers.engines.calls import ENGINE_CALL_SECONDS
from containers.engines.deadlines import EngineBusy
from containers.execution.engine_loss import runtime_engine_lost, runtime_instances_clear_away
from containers.execution.health import runtime_health_record
from containers.execution.reconciler.config import _config
from containers.execution.reconciler.engines import distinct_engines, engine_share
from containers.execution.reconciler.orphans import orphans_scan
from containers.execution.reconciler.report import ReconcileReport
from containers.execution.reconciler.rows import (
    STOPPED_BATCH,
    _active_rows,
    _has_stopped,
    _stopped_rows,
)
from containers.execution.reconciler.timeouts import instance_fail_stuck
from containers.execution.sync import (
    Sync,
    instance_sync,
    running_as_recorded,
    stopped_as_recorded,
)
from containers.installation import installation_id
from containers.models import ContainerInstance, Runtime
from containers.states import ACTIVE_SLOTS

log = logging.getLogger(__name__)


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
