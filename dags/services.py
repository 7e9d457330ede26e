"""Writes: DAG templates, and the requests on runs (start, cancel, retry failed).

Each request on a run is one transaction: lock the run's row, check, transition, record,
and ask the runner (``dags.runner``) to advance it through the outbox. What follows
(creating, stopping and deleting instances) is the runner's job.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from containers.errors import NotFound as ContainerNotFound
from containers.models import ContainerTemplate
from containers.selectors import template_get
from containers.spec.resolve import template_snapshot
from dags.errors import DagInvalid, InvalidTransition, NotFound
from dags.graph import clean_nodes, topological
from dags.history import START, advance_soon, node_move, record, run_move
from dags.models import DagNodeRun, DagRun, DagTemplate
from dags.selectors import dag_template_list
from dags.states import RUN_ACTIVE, RUN_CANCELLABLE, RUN_RETRYABLE, NodeStatus, RunStatus


def dag_nodes_clean(nodes: Any) -> list[dict[str, Any]]:
    """Validate ``nodes`` (``dags.graph.clean_nodes``) and resolve each template (by name
    or id) to its id; an unknown template is refused naming the node."""
    cleaned = clean_nodes(nodes)
    for node in cleaned:
        try:
            node["template"] = template_get(ref=node["template"]).pk
        except ContainerNotFound:
            raise DagInvalid(
                f"node {node['key']}: unknown template {node['template']!r}",
                node=node["key"],
                template=str(node["template"]),
            ) from None
    return cleaned


def dag_template_save(
    *,
    name: str,
    nodes: Any,
    description: str = "",
    dag: DagTemplate | None = None,
) -> DagTemplate:
    """Create (or, given ``dag``, replace) a DAG template after validating it whole.

    Refused with ``DagInvalid`` (nothing saved): a bad name, a name in use, any problem
    ``dag_nodes_clean`` finds. Runs under way keep their snapshot.
    """
    name = (name or "").strip()
    if not name or len(name) > 128:
        raise DagInvalid("name: 1 to 128 characters", field="name")
    cleaned = dag_nodes_clean(nodes)
    dag = dag or DagTemplate()
    dag.name, dag.nodes, dag.description = name, cleaned, description or ""
    try:
        with transaction.atomic():
            dag.save()
    except IntegrityError:
        raise DagInvalid(f"name: a DAG template named {name!r} exists", field="name") from None
    return dag


def dag_template_delete(*, dag: DagTemplate) -> None:
    """Delete a DAG template; its runs keep their snapshot (and its name)."""
    dag.delete()


def dag_run_start(*, dag: DagTemplate, owner, actor: str) -> DagRun:
    """Start a run of ``dag`` for ``owner``: one transaction that snapshots the graph and
    the container templates, makes the run (``pending``) and its nodes (``waiting``),
    and asks the runner to advance it.

    ``NotFound`` when ``owner`` may not use every template of the DAG (as if it did not
    exist); ``DagInvalid`` when a template was deleted since the DAG was saved.
    """
    if not dag_template_list(user=owner).filter(pk=dag.pk).exists():
        raise NotFound(f"no DAG template {dag.name!r}", dag_template=dag.name)
    ids = dag.template_ids()
    templates = {t.pk: t for t in ContainerTemplate.objects.filter(pk__in=ids)}
    missing = sorted(ids - set(templates))
    if missing:
        raise DagInvalid(f"DAG {dag.name}: template {missing[0]} no longer exists")
    order = {key: index for index, key in enumerate(topological(dag.nodes))}
    graph = sorted(dag.nodes, key=lambda node: order[node["key"]])
    with transaction.atomic():
        run = DagRun.objects.create(
            template=dag,
            template_name=dag.name,
            owner=owner,
            graph=graph,
            templates={str(pk): template_snapshot(t) for pk, t in templates.items()},
            created_by=actor,
        )
        DagNodeRun.objects.bulk_create(
            DagNodeRun(
                run=run,
                key=node["key"],
                depends_on=node["depends_on"],
                retries=node["retries"],
            )
            for node in graph
        )
        record(
            run.id,
            owner_id=run.owner_id,
            kind=START,
            actor=actor,
            to_status=RunStatus.PENDING,
            message=f"run of {dag.name} ({len(graph)} nodes) requested for {owner}",
        )
        advance_soon(run.id, why="started")
    return run


def _locked(run_id) -> DagRun:
    run = DagRun.objects.select_for_update().filter(id=run_id).first()
    if run is None:
        raise NotFound(f"no DAG run {run_id}", run=str(run_id))
    return run


def dag_run_cancel(*, run_id, actor: str) -> DagRun:
    """Cancel a run: ``pending`` → ``cancelled``; ``running`` → ``cancelling`` with its
    waiting and ready nodes ``cancelled`` (the runner stops or deletes what runs, then
    ends the run). A no-op while cancelling or cancelled; refused once it ended.
    One transaction under the run's row lock.
    """
    with transaction.atomic():
        run = _locked(run_id)
        if run.status in (RunStatus.CANCELLING, RunStatus.CANCELLED):
            return run
        if run.status not in RUN_CANCELLABLE:
            raise InvalidTransition(
                f"cannot cancel run {run}: it is {run.status}", status=run.status, action="cancel"
            )
        reason = f"cancelled by {actor}"
        for node in run.nodes.filter(status__in=[NodeStatus.WAITING, NodeStatus.READY]):
            node_move(node, NodeStatus.CANCELLED, actor=actor, reason=reason)
        if run.status == RunStatus.PENDING:
            run_move(run, RunStatus.CANCELLED, actor=actor, reason=reason)
        else:
            run_move(run, RunStatus.CANCELLING, actor=actor, reason=reason)
        advance_soon(run.id, why="cancel")
        return run


def dag_run_retry_failed(*, run_id, actor: str) -> DagRun:
    """Re-run the failed and skipped nodes of a ``failed`` run: they go back to
    ``waiting`` (with their retries anew), the run to ``running``; succeeded nodes are
    kept. Refused (``InvalidTransition``) for a run in any other state.
    """
    with transaction.atomic():
        run = _locked(run_id)
        if run.status not in RUN_RETRYABLE:
            raise InvalidTransition(
                f"cannot retry run {run}: it is {run.status}, not failed",
                status=run.status,
                action="retry_failed",
            )
        for node in run.nodes.filter(status__in=[NodeStatus.FAILED, NodeStatus.SKIPPED]):
            node_move(node, NodeStatus.WAITING, actor=actor, reason=f"retry failed by {actor}")
        run_move(run, RunStatus.RUNNING, actor=actor, message=f"retry failed by {actor}")
        if run.workspace_removed_at is not None:
            run.workspace_removed_at = None
            run.save(update_fields=["workspace_removed_at"])
        advance_soon(run.id, why="retry failed")
        return run


def dag_run_fail(*, run_id, reason: str, actor: str) -> DagRun | None:
    """Fail a run that cannot move on by itself (its advance went dead), with the
    reason, so it never hangs silently: its open nodes end (waiting → skipped, ready and
    running → failed with the reason), the run → ``failed`` (a ``pending`` run through
    ``running``), and an advance is asked for to clean up by the policies. "Retry failed"
    re-runs it. A run already ended only gets the reason in its history.

    Runs inside the caller's transaction (the relay's dead-letter one) or its own;
    takes the run's row lock. Never raises for a run in any state; None if it is gone.
    """
    reason = reason[:2000]
    with transaction.atomic():
        run = DagRun.objects.select_for_update().filter(id=run_id).first()
        if run is None:
            return None
        if run.status not in (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.CANCELLING):
            record(run.id, owner_id=run.owner_id, kind="advance_dead", actor=actor, message=reason)
            return run
        for node in run.nodes.all():
            if node.status == NodeStatus.WAITING:
                node_move(node, NodeStatus.SKIPPED, actor=actor, reason=reason)
            elif node.status in (NodeStatus.READY, NodeStatus.RUNNING):
                node_move(node, NodeStatus.FAILED, actor=actor, reason=reason)
        if run.status == RunStatus.PENDING:
            run_move(run, RunStatus.RUNNING, actor=actor, message="started, to record why not")
        run_move(run, RunStatus.FAILED, actor=actor, reason=reason)
        advance_soon(run.id, why="clean up after a dead advance")
        return run


def dag_node_output_keep(*, run_id, key: str, attempt: int, output: str, actor: str) -> None:
    """Keep a failed attempt's last output on its node (the runner, before it asks for
    that attempt's container to be removed).

    One short transaction under the run's row lock; the output was read from the engine
    before it, outside any transaction. Idempotent: an attempt older than the one kept
    changes nothing, so a node keeps the output of its latest failed attempt.
    """
    with transaction.atomic():
        run = DagRun.objects.select_for_update().filter(id=run_id).first()
        node = run.nodes.filter(key=key).first() if run is not None else None
        if node is None or (node.output_attempt or 0) > attempt:
            return
        node.output = output
        node.output_attempt = attempt
        node.save(update_fields=["output", "output_attempt"])
        record(
            run_id,
            owner_id=run.owner_id,
            kind="output_kept",
            actor=actor,
            node=key,
            message=f"attempt {attempt}",
        )


def dag_runs_on_runtime(*, runtime_id: int) -> list[str]:
    """One line per DAG run placed on the runtime (its name, id and status), for the
    confirmation of the runtime's decommission. Reads only."""
    runs = DagRun.objects.filter(runtime_id=runtime_id).order_by("-created_at")
    return [f"DAG run {run} ({run.status})" for run in runs.only("id", "template_name", "status")]


def dag_runs_runtime_gone(
    *, runtime_id: int, runtime_name: str, reason: str, actor: str
) -> list[str]:
    """The runtime is decommissioned (its engine gone for good, its instances forgotten):
    every run placed there that is still active ends ``failed`` with ``reason``
    (``dag_run_fail``: open nodes fail or are skipped), and every run placed there lets
    go of the runtime (``runtime`` emptied, its workspace on that engine noted as gone),
    so the runner never calls that engine again and the runtime row can be deleted.
    Returns one line per run it changed.

    Runs inside the caller's transaction; takes each run's row lock (the caller holds
    no instance row lock). Idempotent: a second call finds no run placed there.
    """
    lines = []
    with transaction.atomic():
        runs = DagRun.objects.select_for_update().filter(runtime_id=runtime_id).order_by("pk")
        for run in runs:
            failed = run.status in RUN_ACTIVE
            if failed:
                dag_run_fail(run_id=run.id, reason=reason, actor=actor)
                run.refresh_from_db()
            run.runtime = None
            run.workspace_removed_at = run.workspace_removed_at or timezone.now()
            run.save(update_fields=["runtime", "workspace_removed_at"])
            record(
                run.id,
                owner_id=run.owner_id,
                kind="runtime_released",
                actor=actor,
                message=f"{reason}: runtime {runtime_name}",
            )
            lines.append(f"DAG run {run} {'failed' if failed else 'released'}: {reason}")
    return lines
