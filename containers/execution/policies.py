"""The lifecycle policies' pass: time limits, idle culling and retention (docs/operations.md,
"Policies").

The monitor runs ``policies_pass`` every ``container.policies.interval``. Every action it
takes is an ordinary request through the service layer (``container_stop``,
``container_delete``, ``workspace_remove``) with the actor ``policy`` and the rule in its
reason, so it obeys the state machine, the outbox, per-instance ordering and the history.

What a pass reads is due rows only: the transitions arm each instance's deadlines from
its ``spec["policy"]`` (``ContainerInstance.stop_at``, ``idle_since``, ``delete_at``), and
each rule reads its rows through a partial index on its column, at most ``batch_size`` a
rule (the rest wait for the next pass). Instances without a policy (DAG nodes) have no
deadline and are never read. Idempotent: each action re-reads its row under the row's
lock and acts only if the rule still holds (an extension that came in between wins), and
a repeated request is the service's no-op.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
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
from containers.models import ContainerInstance, Runtime, Workspace
from containers.requests.lifecycle import instance_lock
from containers.requests.services import container_delete, container_stop
from containers.spec.policies import lifetime_reason, span
from containers.states import Status
from core.errors import DomainError

log = logging.getLogger(__name__)

RUNNING = (Status.RUNNING, Status.PAUSED)
RESTED = (Status.STOPPED, Status.FAILED)


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]["policies"]


@dataclass
class PolicyReport:
    """What one pass did; the monitor logs it."""

    stopped_lifetime: int = 0
    stopped_idle: int = 0
    deleted: int = 0
    sampled: int = 0
    workspaces_removed: int = 0
    errors: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        text = (
            f"stopped {self.stopped_lifetime} (max_lifetime) and {self.stopped_idle} "
            f"(idle_timeout), deleted {self.deleted}, sampled {self.sampled}, "
            f"workspaces removed {self.workspaces_removed}"
        )
        return text + (f", errors: {'; '.join(self.errors)}" if self.errors else "")

    @property
    def acted(self) -> bool:
        return bool(
            self.stopped_lifetime + self.stopped_idle + self.deleted + self.workspaces_removed
        )


def _stop_if_due(instance_id, *, now: dt.datetime) -> bool:
    """Stop the instance if its ``stop_at`` is still due, under its row lock."""
    with transaction.atomic():
        instance = instance_lock(instance_id)
        if instance is None or instance.status not in RUNNING:
            return False
        if instance.stop_at is None or instance.stop_at > now:
            return False  # extended (or restarted) since the pass read it
        result = container_stop(
            instance_id=instance.id,
            actor=POLICY,
            reason=lifetime_reason(instance.spec.get("policy") or {}, instance.extended_seconds),
            data={"rule": "max_lifetime", "stop_at": instance.stop_at.isoformat()},
        )
        return result.queued


def _delete_if_due(instance_id, *, now: dt.datetime) -> bool:
    """Delete the stopped or failed instance if its ``delete_at`` is still due."""
    with transaction.atomic():
        instance = instance_lock(instance_id)
        if instance is None or instance.status not in RESTED:
            return False
        if instance.delete_at is None or instance.delete_at > now:
            return False
        after = (instance.spec.get("policy") or {}).get("delete_stopped_after") or 0
        result = container_delete(
            instance_id=instance.id,
            actor=POLICY,
            reason=f"delete_stopped_after: {instance.status} for longer than {span(after)}",
            data={"rule": "delete_stopped_after"},
        )
        return result.queued


def _stop_if_idle(instance_id, *, idle_since: dt.datetime, cores: float) -> bool:
    """Stop the instance if it is still running and idle since ``idle_since``."""
    with transaction.atomic():
        instance = instance_lock(instance_id)
        if instance is None or instance.status != Status.RUNNING:
            return False
        if instance.idle_since != idle_since:
            return False  # busy again, or restarted, since the sample
        policy = instance.spec.get("policy") or {}
        result = container_stop(
            instance_id=instance.id,
            actor=POLICY,
            reason=(
                f"idle_timeout: used less than {policy.get('idle_cpu_threshold')} cores "
                f"for {span(policy.get('idle_timeout') or 0)} (last {cores:.3f})"
            ),
            data={"rule": "idle_timeout", "cores": round(cores, 4)},
        )
        return result.queued


def _sample(stats: ContainerStats) -> dict[str, Any]:
    return {"read_at": stats.read_at, "cpu_total_ns": stats.cpu_total_ns}


def _previous(sample: dict[str, Any] | None) -> ContainerStats | None:
    if not sample:
        return None
    return ContainerStats(read_at=sample["read_at"], cpu_total_ns=sample.get("cpu_total_ns"))


def idle_watch(*, report: PolicyReport, now: dt.datetime, batch: int) -> None:
    """The idle_timeout rule: one ``stats`` call per watched container per pass.

    1. Read the running instances under an idle rule (``idle_since`` set: its partial
       index), the longest idle first, at most ``batch``.
    2. Per engine (bounded like a reconcile's share of it), look at each container's CPU
       once and take the cores used since the last look (``cores_since``).
    3. Above the template's threshold: ``idle_since`` becomes now (compare-and-set on the
       running row, with the sample); below it, or not yet known, only the sample is
       stored; idle for ``idle_timeout``: stop it (``_stop_if_idle``).
    """
    rows = list(
        ContainerInstance.objects.filter(idle_since__isnull=False, status=Status.RUNNING)
        .order_by("idle_since")
        .only("id", "runtime_id", "container_id", "idle_since", "cpu_sample", "spec")[:batch]
    )
    by_runtime: dict[int, list[ContainerInstance]] = {}
    for row in rows:
        by_runtime.setdefault(row.runtime_id, []).append(row)
    seconds = float(settings.GOBRAVE["container"]["reconcile_engine_timeout"])
    for runtime in Runtime.objects.filter(pk__in=list(by_runtime)):
        try:
            engine = engine_share(runtime, seconds)
            for instance in by_runtime[runtime.pk]:
                stats = engine.stats(instance.container_id or instance.container_name)
                report.sampled += 1
                if stats is None:
                    continue  # not running there: the reconciler's business
                _judge(instance, stats, report=report, now=now)
        except EngineError as exc:
            report.errors.append(f"idle_timeout on {runtime.name}: {exc}")


def _judge(
    instance: ContainerInstance, stats: ContainerStats, *, report: PolicyReport, now: dt.datetime
) -> None:
    policy = instance.spec.get("policy") or {}
    cores = stats.cores_since(_previous(instance.cpu_sample))
    idle_since = instance.idle_since
    if cores is not None and cores >= float(policy.get("idle_cpu_threshold") or 0):
        idle_since = now
    ContainerInstance.objects.filter(
        id=instance.id, status=Status.RUNNING, idle_since=instance.idle_since
    ).update(cpu_sample=_sample(stats), idle_since=idle_since)
    timeout = float(policy.get("idle_timeout") or 0)
    if cores is None or idle_since == now or not timeout:
        return
    if (now - idle_since).total_seconds() >= timeout:
        report.stopped_idle += _stop_if_idle(instance.id, idle_since=idle_since, cores=cores)


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
    for instance_id in list(due.order_by("stop_at").values_list("id", flat=True)[:batch]):
        try:
            report.stopped_lifetime += _stop_if_due(instance_id, now=now)
        except DomainError as exc:
            report.errors.append(f"max_lifetime {instance_id}: {exc}")
    due = ContainerInstance.objects.filter(delete_at__lte=now, status__in=RESTED)
    for instance_id in list(due.order_by("delete_at").values_list("id", flat=True)[:batch]):
        try:
            report.deleted += _delete_if_due(instance_id, now=now)
        except DomainError as exc:
            report.errors.append(f"delete_stopped_after {instance_id}: {exc}")
    idle_watch(report=report, now=now, batch=batch)
    workspaces_retire(report=report, now=now, batch=batch)
    if report.acted or report.errors:
        log.info("policies: %s", report)
    return report
