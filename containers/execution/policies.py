"""The lifecycle policies' pass: time limits, idle culling and retention (docs/operations.md,
"Policies").

The monitor runs ``policies_pass`` every ``container.policies.interval``. Every action it
takes is an ordinary request through the service layer (stops and deletes in bulk,
``container_requests_bulk``: each the same request as ``container_stop`` or
``container_delete``, a hundred to a transaction; ``workspace_remove``) with the actor
``policy`` and the rule in its reason, so it obeys the state machine, the outbox,
per-instance ordering and the history.

What a pass reads is due rows only: the transitions arm each instance's deadlines from
its ``spec["policy"]`` (``ContainerInstance.stop_at``, ``idle_since``, ``delete_at``), and
each rule reads its rows through a partial index on its column, at most ``batch_size`` a
rule (the rest wait for the next pass; the idle watch takes its rows in turn). Instances
without a policy (DAG nodes) have no deadline and are never read. Idempotent: each
action re-reads its row under the row's lock and acts only if the rule still holds (an
extension that came in between wins); a row another transaction holds is left to the
next pass, and a repeated request is the service's no-op.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import (
    Case,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    PositiveIntegerField,
    Q,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from containers.actors import POLICY
from containers.engines.base import ContainerStats, EngineError
from containers.execution.housekeeping import workspace_remove
from containers.execution.reconciler import engine_share
from containers.execution.reports import PassReport
from containers.models import ContainerInstance, Runtime, Workspace
from containers.requests.bulk import container_requests_bulk
from containers.spec.policies import lifetime_reason, span
from containers.states import Status
from core.errors import DomainError

log = logging.getLogger(__name__)

RUNNING = (Status.RUNNING, Status.PAUSED)
RESTED = (Status.STOPPED, Status.FAILED)


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]["policies"]


@dataclass
class PolicyReport(PassReport):
    """What one pass did; the monitor logs it."""

    stopped_lifetime: int = 0
    stopped_idle: int = 0
    deleted: int = 0
    sampled: int = 0
    unmeasured: int = 0
    workspaces_removed: int = 0

    def counts(self) -> str:
        unmeasured = f" ({self.unmeasured} without a figure)" if self.unmeasured else ""
        return (
            f"stopped {self.stopped_lifetime} (max_lifetime) and {self.stopped_idle} "
            f"(idle_timeout), deleted {self.deleted}, sampled {self.sampled}{unmeasured}, "
            f"workspaces removed {self.workspaces_removed}"
        )

    @property
    def acted(self) -> bool:
        return bool(
            self.stopped_lifetime + self.stopped_idle + self.deleted + self.workspaces_removed
        )


def _lifetime_why(instance: ContainerInstance) -> tuple[str, dict[str, Any]]:
    """The history entry of a max_lifetime stop, from the row as it is locked."""
    reason = lifetime_reason(instance.spec.get("policy") or {}, instance.extended_seconds)
    return reason, {"rule": "max_lifetime", "stop_at": instance.stop_at.isoformat()}


def _delete_why(instance: ContainerInstance) -> tuple[str, dict[str, Any]]:
    """The history entry of a delete_stopped_after delete."""
    after = (instance.spec.get("policy") or {}).get("delete_stopped_after") or 0
    reason = f"delete_stopped_after: {instance.status} for longer than {span(after)}"
    return reason, {"rule": "delete_stopped_after"}


def _idle_why(judged: dict[uuid.UUID, tuple[dt.datetime, float]]):
    """The history entry of an idle_timeout stop, or None when the row was busy again (or
    restarted) since the sample: its ``idle_since`` is no longer the one judged."""

    def why(instance: ContainerInstance) -> tuple[str, dict[str, Any]] | None:
        idle_since, cores = judged[instance.id]
        if instance.idle_since != idle_since:
            return None
        policy = instance.spec.get("policy") or {}
        reason = (
            f"idle_timeout: used less than {policy.get('idle_cpu_threshold')} cores "
            f"for {span(policy.get('idle_timeout') or 0)} (last {cores:.3f})"
        )
        return reason, {"rule": "idle_timeout", "cores": round(cores, 4)}

    return why


def _act(action: str, ids: list[uuid.UUID], rows, why, *, rule: str, report: PolicyReport) -> int:
    """The policy's requests for ``ids`` still among ``rows`` (the rule's condition, checked
    again under each row's lock), in bulk (``container_requests_bulk``: a transaction per
    chunk, each request an ordinary one). Returns how many were written; refusals go to
    the report's errors; rows another transaction held are left to the next pass."""
    if not ids:
        return 0
    done = container_requests_bulk(action, instance_ids=ids, rows=rows, actor=POLICY, why=why)
    report.errors.extend(f"{rule} {key}: {message}" for key, message in done.refused.items())
    return len(done.queued)


def _sample(stats: ContainerStats, *, quiet: bool) -> dict[str, Any]:
    """The look kept on the row: a counter's value (the next look's difference starts
    there) and, for a rate, whether it was below the threshold (``quiet``: a series of
    quiet looks is on; always False for a counter)."""
    return {"read_at": stats.read_at, "cpu_total_ns": stats.cpu_total_ns, "quiet": quiet}


def _previous(sample: dict[str, Any] | None) -> ContainerStats | None:
    if not sample:
        return None
    return ContainerStats(read_at=sample["read_at"], cpu_total_ns=sample.get("cpu_total_ns"))


def idle_turn(batch: int):
    """The idle watch's next rows: the running instances under an idle rule, the longest
    unchecked first, read on ``instance_policy_idle_turn`` (its rows are the watched ones:
    a transition out of ``running`` clears ``idle_since``)."""
    return (
        ContainerInstance.objects.filter(idle_since__isnull=False, status=Status.RUNNING)
        .order_by(Coalesce("idle_checked_at", "idle_since"), "id")
        .only("id", "runtime_id", "container_id", "idle_since", "cpu_sample", "spec")[:batch]
    )


def idle_watch(*, report: PolicyReport, now: dt.datetime, batch: int) -> None:
    """The idle_timeout rule: at most one ``stats`` call per watched container per pass.

    1. Read the running instances under an idle rule (``idle_turn``: ``idle_since`` set,
       which only a running row has; its partial index) in turn, the longest unchecked
       first (``idle_checked_at``; never checked: since ``idle_since``, when the run
       began), at most ``batch``, and mark them checked now: every row read has had its
       turn, whatever the engine says of it, so rows it gives no figure for (or an engine
       that does not answer) never keep the rows behind them from being looked at.
    2. Per engine (bounded like a reconcile's share of it), look at each container's CPU
       once and take the cores used since the last look (``cores_since``).
    3. At or above the template's threshold: ``idle_since`` becomes now (compare-and-set
       on the running row, with the sample). Below it: a counter's figure (the average
       since the last look, Docker) leaves ``idle_since`` as it is; a rate (the engine's
       average over its own recent window, the Kubernetes metrics API: it says nothing
       of the time between looks) sets ``idle_since`` to now on the first quiet look of
       a series, and leaves it on the next ones; a look without a figure breaks a series
       of quiet rate looks. Idle for ``idle_timeout``: stop it (in bulk, after the looks,
       if its ``idle_since`` is still the one judged).
    """
    rows = list(idle_turn(batch))
    if not rows:
        return
    ContainerInstance.objects.filter(id__in=[row.id for row in rows]).update(idle_checked_at=now)
    by_runtime: dict[int, list[ContainerInstance]] = {}
    for row in rows:
        by_runtime.setdefault(row.runtime_id, []).append(row)
    seconds = float(settings.GOBRAVE["container"]["reconcile_engine_timeout"])
    judged: dict[uuid.UUID, tuple[dt.datetime, float]] = {}
    for runtime in Runtime.objects.filter(pk__in=list(by_runtime)):
        try:
            engine = engine_share(runtime, seconds)
            for instance in by_runtime[runtime.pk]:
                stats = engine.stats(instance.container_id or instance.container_name)
                report.sampled += 1
                if stats is None:
                    report.unmeasured += 1
                    _series_break(instance)
                    continue  # not running there: the reconciler's business
                _judge(instance, stats, report=report, now=now, judged=judged)
        except EngineError as exc:
            report.errors.append(f"idle_timeout on {runtime.name}: {exc}")
    running = ContainerInstance.objects.filter(status=Status.RUNNING)
    report.stopped_idle += _act(
        "stop", list(judged), running, _idle_why(judged), rule="idle_timeout", report=report
    )


def _judge(
    instance: ContainerInstance,
    stats: ContainerStats,
    *,
    report: PolicyReport,
    now: dt.datetime,
    judged: dict[uuid.UUID, tuple[dt.datetime, float]],
) -> None:
    """Store the sample (and the row's new ``idle_since``: a busy look, or a rate's first
    quiet look); a row idle for its ``idle_timeout`` goes into ``judged`` (id → the
    ``idle_since`` and cores it was judged on) to be stopped.

    A rate's series: ``idle_since`` is the first of an unbroken series of quiet looks
    (a look at or above the threshold, or one without a figure, ends it), so one quiet
    window after a busy hour is not an idle hour; the first quiet look never stops
    (``idle_since`` is now). A counter's quiet figure covers the whole time since the
    last look, so ``idle_since`` stays the last busy look (or the run's start)."""
    policy = instance.spec.get("policy") or {}
    cores = stats.cores_since(_previous(instance.cpu_sample))
    idle_since = instance.idle_since
    quiet = False
    if cores is None:
        report.unmeasured += 1
    elif cores >= float(policy.get("idle_cpu_threshold") or 0):
        idle_since = now
    elif stats.is_rate:
        quiet = True
        if not (instance.cpu_sample or {}).get("quiet"):
            idle_since = now  # a series of quiet looks begins
    ContainerInstance.objects.filter(
        id=instance.id, status=Status.RUNNING, idle_since=instance.idle_since
    ).update(cpu_sample=_sample(stats, quiet=quiet), idle_since=idle_since)
    timeout = float(policy.get("idle_timeout") or 0)
    if cores is None or idle_since == now or not timeout:
        return
    if (now - idle_since).total_seconds() >= timeout:
        judged[instance.id] = (idle_since, cores)


def _series_break(instance: ContainerInstance) -> None:
    """A look without a figure ends a series of quiet looks (the next quiet one begins a
    new series): what the container did meanwhile is unknown. One UPDATE, only when a
    series was on (rates only: a counter's next difference covers the gap anyway)."""
    if (instance.cpu_sample or {}).get("quiet"):
        ContainerInstance.objects.filter(
            id=instance.id, status=Status.RUNNING, idle_since=instance.idle_since
        ).update(cpu_sample={**instance.cpu_sample, "quiet": False})


def workspaces_retire(*, report: PolicyReport, now: dt.datetime, batch: int) -> None:
    """The workspace_retention rule: a volume workspace whose owner has had no instance
    for as long as its retention is removed (``workspace_remove``, which checks again
    under the row lock).

    A workspace's retention is the longest of those of the deleted instances that
    mounted it (``workspaces.workspace_retention_note``): their templates' own values
    (``retention``) and, if any of them took it or none is recorded yet, config.yml's
    (``retention_default``); 0 or an empty config.yml value among them keeps it.
    1. Clear ``unused_since`` of the workspaces whose owner has an instance again.
    2. Set it on the watched workspaces (a retention that ends) whose owner has none.
    3. Remove those unused for their retention, at most ``batch``.
    One statement each over the workspaces (one row per owner and engine, not per
    instance), each probing the instances' owner index; with config.yml's value empty,
    only workspaces a template set a retention on are watched.
    """
    default = int(_config()["workspace_retention"] or 0)
    volumes = Workspace.objects.filter(kind=Runtime.WorkspaceDriver.VOLUME)
    templates_only = Q(retention_default=False)
    watched_q = templates_only & Q(retention__gt=0)
    if default:
        watched_q |= ~Q(retention_default=False) & (Q(retention__isnull=True) | Q(retention__gt=0))
    watched = volumes.filter(watched_q)
    used = ContainerInstance.objects.filter(owner_id=OuterRef("owner_id"))
    volumes.filter(unused_since__isnull=False).filter(Exists(used)).update(unused_since=None)
    watched.filter(unused_since__isnull=True).exclude(Exists(used)).update(unused_since=now)
    seconds = Case(
        When(templates_only, then=F("retention")),
        default=Greatest(Coalesce(F("retention"), Value(default)), Value(default)),
        output_field=PositiveIntegerField(),
    )
    keep = ExpressionWrapper(seconds * Value(dt.timedelta(seconds=1)), output_field=DurationField())
    due = (
        watched.filter(unused_since__isnull=False)
        .alias(due_at=F("unused_since") + keep)
        .filter(due_at__lte=now)
        .order_by("unused_since")
        .values_list("pk", flat=True)[:batch]
    )
    for workspace_id in list(due):
        try:
            workspace_remove(workspace_id=workspace_id, actor=POLICY)
        except DomainError as exc:  # in use again, or the engine did not answer
            report.errors.append(f"workspace_retention: {exc}")
            continue
        report.workspaces_removed += 1


def policies_pass(*, now: dt.datetime | None = None) -> PolicyReport:
    """One pass of every rule. Must run outside a transaction (engine calls).

    1. max_lifetime: running or paused instances whose ``stop_at`` passed → stop.
    2. delete_stopped_after: stopped or failed instances whose ``delete_at`` passed →
       delete (the history stays).
    3. idle_timeout: ``idle_watch``.
    4. workspace_retention: ``workspaces_retire``.
    Each reads its due rows through its partial index, at most ``batch_size``.
    """
    now = now or timezone.now()
    batch = int(_config()["batch_size"])
    report = PolicyReport()
    due = ContainerInstance.objects.filter(stop_at__lte=now, status__in=RUNNING)
    ids = list(due.order_by("stop_at").values_list("id", flat=True)[:batch])
    report.stopped_lifetime += _act(
        "stop", ids, due, _lifetime_why, rule="max_lifetime", report=report
    )
    due = ContainerInstance.objects.filter(delete_at__lte=now, status__in=RESTED)
    ids = list(due.order_by("delete_at").values_list("id", flat=True)[:batch])
    report.deleted += _act(
        "delete", ids, due, _delete_why, rule="delete_stopped_after", report=report
    )
    idle_watch(report=report, now=now, batch=batch)
    workspaces_retire(report=report, now=now, batch=batch)
    if report.acted or report.errors:
        log.info("policies: %s", report)
    return report
