"""Reads: DAG templates and runs a user may see, and the instances of a run."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Sum,
)

from containers import access
from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate
from containers.queues import RequestKind
from core.ids import uuid_prefix
from core.tallies import tallies_kept, tally_read
from dags.errors import NotFound
from dags.history import instance_id_for
from dags.models import DagEvent, DagNodeRun, DagRun, DagTemplate
from dags.states import RunStatus


def _sees_all(user, model: str) -> bool:
    return bool(user is None or user.has_perm(f"dags.view_{model}"))


def usable_template_ids(user) -> set[int] | None:
    """Ids of the container templates ``user`` may use (the containers app's rule:
    enabled, and open to one of their groups); None means no user, no limit."""
    if user is None:
        return None
    return set(
        ContainerTemplate.objects.filter(access.usable_templates_q(user)).values_list(
            "pk", flat=True
        )
    )


def dag_template_list(*, user=None) -> QuerySet[DagTemplate]:
    """DAG templates ``user`` may list and start: every container template in each must be
    usable by them (contract §7; operators too: seeing a template is not using it)."""
    rows = DagTemplate.objects.order_by("name")
    usable = usable_template_ids(user)
    if usable is None:
        return rows
    allowed = [dag.pk for dag in rows if dag.template_ids() <= usable]
    return rows.filter(pk__in=allowed)


def dag_secret_env(dags: Iterable[DagTemplate]) -> dict[int, list[str]]:
    """The ``secret_env`` of every container template the nodes of ``dags`` use, by id
    (one query): what ``containers.spec.redaction.dag_nodes_for`` hides."""
    ids = set().union(*(dag.template_ids() for dag in dags))
    rows = ContainerTemplate.objects.filter(pk__in=ids).values_list("pk", "secret_env")
    return {pk: list(secret or ()) for pk, secret in rows}


def dag_template_get(*, ref: Any, user=None) -> DagTemplate:
    """A DAG template by id or name that ``user`` may use; ``NotFound`` for any other."""
    rows = dag_template_list(user=user)
    text = str(ref)
    found = rows.filter(name=text).first()
    if found is None and text.isascii() and text.isdigit() and len(text) < 19:
        found = rows.filter(pk=int(text)).first()
    if found is None:
        raise NotFound(f"no DAG template {text!r}", dag_template=text)
    return found


def dag_run_list(*, user=None, statuses: list[str] | None = None) -> QuerySet[DagRun]:
    """Runs newest first; a user without ``view_dagrun`` sees only their own."""
    rows = DagRun.objects.select_related("owner", "runtime", "template").order_by("-created_at")
    if statuses:
        rows = rows.filter(status__in=statuses)
    if not _sees_all(user, "dagrun"):
        rows = rows.filter(owner=user)
    return rows


def dag_run_get(*, run_id: Any, user=None) -> DagRun:
    """One run ``user`` may see, by its uuid or a unique prefix of at least 8 hex digits
    (dashes optional: ``core.ids.uuid_prefix``, as for instances); ``NotFound`` otherwise."""
    text = str(run_id).strip().lower()
    rows = dag_run_list(user=user)
    try:
        return rows.get(id=uuid.UUID(text))
    except (ValueError, DagRun.DoesNotExist):
        pass
    prefix = uuid_prefix(text)
    if prefix is not None:
        matches = list(rows.filter(id__startswith=prefix)[:2])
        if len(matches) == 1:
            return matches[0]
    raise NotFound(f"no DAG run {str(run_id)!r}", run=str(run_id))


def run_nodes(run: DagRun) -> list[DagNodeRun]:
    return list(run.nodes.order_by("id"))


def node_output_spec(run: DagRun, key: str) -> dict[str, Any]:
    """The env and ``secret_env`` node ``key`` of ``run`` ran with, from the run's
    snapshot: what ``redaction.logs_for`` needs to scrub its kept output."""
    spec = next((s for s in run.graph if s["key"] == key), {})
    snapshot = run.templates.get(str(spec.get("template"))) or {}
    env = {**(snapshot.get("env") or {}), **(spec.get("env") or {})}
    return {"env": env, "secret_env": snapshot.get("secret_env") or []}


def run_events(run: DagRun) -> QuerySet[DagEvent]:
    """The run's history, newest first (the API pages it by cursor)."""
    return DagEvent.objects.filter(run_id=run.id).order_by("-created_at", "-id")


def run_history_after(*, run_id: uuid.UUID | str, after_id: int = 0) -> QuerySet[DagEvent]:
    """History rows of a run and its nodes newer than ``after_id``, oldest first."""
    return DagEvent.objects.filter(run_id=run_id, id__gt=after_id).order_by("id")


def run_state(*, run_id: uuid.UUID | str) -> DagRun | None:
    """The run's status and reason only (None once the row is gone)."""
    return DagRun.objects.filter(pk=run_id).only("id", "status", "reason").first()


def attempt_ids(run_id: uuid.UUID | str, nodes: list[DagNodeRun]) -> dict[uuid.UUID, tuple]:
    """Every instance id the run's nodes ever had: id → (node key, attempt)."""
    return {
        instance_id_for(run_id, node.key, attempt): (node.key, attempt)
        for node in nodes
        for attempt in range(1, node.attempt + 1)
    }


def instances_by_id(ids) -> dict[uuid.UUID, ContainerInstance]:
    """The instances that still exist among ``ids`` (read without locks)."""
    return {i.id: i for i in ContainerInstance.objects.filter(id__in=list(ids))}


def requests_by_others(ids, *, actor: str) -> dict[uuid.UUID, tuple[str, str]]:
    """Stop or delete requests made for these instances by anyone but ``actor``:
    instance id → (request kind, who asked), the first of each."""
    found: dict[uuid.UUID, tuple[str, str]] = {}
    rows = (
        ContainerEvent.objects.filter(
            instance_id__in=list(ids), kind__in=[RequestKind.STOP, RequestKind.DELETE]
        )
        .exclude(actor=actor)
        .order_by("id")
        .values_list("instance_id", "kind", "actor")
    )
    for instance_id, kind, who in rows:
        found.setdefault(instance_id, (kind, who))
    return found


def was_created(instance_id: uuid.UUID) -> bool:
    return ContainerEvent.objects.filter(instance_id=instance_id, kind=RequestKind.CREATE).exists()


def live_template(template_id: int, *, owner) -> ContainerTemplate | None:
    """The container template as it is now, or None when it is gone.

    The same query asks whether ``owner`` may use it (``access.usable_templates_q``) and
    marks it so when they may (``access.mark_usable``): the create service then checks
    nothing again. One that they may not use comes back unmarked, and the service
    refuses it as usual.
    """
    rows = ContainerTemplate.objects.filter(pk=template_id)
    usable = ContainerTemplate.objects.filter(access.usable_templates_q(owner), pk=OuterRef("pk"))
    template = rows.annotate(usable_by_owner=Exists(usable)).first()
    if template is not None and template.usable_by_owner:
        access.mark_usable(template, owner)
    return template


# --- Figures for /metrics -------------------------------------------------------------------------


#: Node durations, from a quick step to a long job (seconds): the histogram's bounds. The
#: tally's trigger (migration 0005) buckets by them: other bounds need a migration.
NODE_DURATION_BOUNDS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
RUN_TALLY = "dags.runs"
DURATION_TALLY = "dags.node_durations"


def run_counts() -> dict[str, int]:
    """``{status: runs}`` over every run (every status present, 0 where none); one query,
    over the tally the table's triggers keep (``core.tallies``; SQLite: a grouped count)."""
    if tallies_kept():
        counts = {key: n for key, (n, _total) in tally_read(RUN_TALLY).items()}
    else:
        counts = dict(DagRun.objects.order_by().values_list("status").annotate(n=Count("id")))
    return {status: counts.get(status, 0) for status in RunStatus}


@dataclass(frozen=True)
class DurationHistogram:
    """Cumulative counts of durations at or below each bound, their count and sum."""

    buckets: list[int]  # one per bound, cumulative
    count: int
    seconds: float


def node_durations() -> dict[str, DurationHistogram]:
    """Durations (``finished_at - started_at``) of the node runs that have both, by status,
    bucketed by ``NODE_DURATION_BOUNDS``.

    One query over the tally the table's triggers keep (``core.tallies``): its cost is
    the statuses and buckets, not the node runs. Purged runs leave it (Prometheus reads
    the drop as a reset).
    """
    if not tallies_kept():
        return _node_durations_counted(NODE_DURATION_BOUNDS)
    per_bucket: dict[str, list[int]] = {}
    seconds: dict[str, float] = {}
    for key, (n, total) in tally_read(DURATION_TALLY).items():
        status, _, bucket = key.partition(" ")
        counts = per_bucket.setdefault(status, [0] * (len(NODE_DURATION_BOUNDS) + 1))
        counts[int(bucket)] += n
        seconds[status] = seconds.get(status, 0.0) + total
    result = {}
    for status, counts in per_bucket.items():
        cumulative = [sum(counts[: i + 1]) for i in range(len(NODE_DURATION_BOUNDS))]
        result[status] = DurationHistogram(
            buckets=cumulative, count=sum(counts), seconds=seconds[status]
        )
    return result


def _node_durations_counted(bounds: Iterable[float]) -> dict[str, DurationHistogram]:
    """``node_durations`` by counting the node runs (SQLite): one grouped query with a
    filtered count per bound."""
    bounds = list(bounds)
    took = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    rows = (
        DagNodeRun.objects.filter(started_at__isnull=False, finished_at__isnull=False)
        .annotate(took=took)
        .order_by()
        .values("status")
        .annotate(
            n=Count("id"),
            total=Sum("took"),
            **{f"le{i}": Count("id", filter=Q(took__lte=dt.timedelta(seconds=b)))
               for i, b in enumerate(bounds)},
        )
    )  # fmt: skip
    return {
        row["status"]: DurationHistogram(
            buckets=[row[f"le{i}"] for i in range(len(bounds))],
            count=row["n"],
            seconds=row["total"].total_seconds() if row["total"] else 0.0,
        )
        for row in rows
    }
