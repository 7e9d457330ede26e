"""Step 1, settle: a pending run started on its engine, running nodes settled from their
instances, what lies below a failure skipped, what may run made ready, the run ended
when no node can move (``_step_settle``, under the run's row lock)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from containers.models import ContainerInstance
from containers.placement.choice import runtime_select
from containers.states import Status
from core.errors import DomainError
from dags.history import node_move, record, run_move, runner_actor
from dags.models import DagNodeRun, DagRun
from dags.runner.cleanup import _cleanup_requests, _outputs_to_keep
from dags.runner.create import _create_locked
from dags.runner.passes import N, Pass, R, _config
from dags.selectors import attempt_ids, instances_by_id, requests_by_others
from dags.states import NODE_OPEN


def _outcome(
    node: DagNodeRun,
    instance: ContainerInstance | None,
    others: dict[uuid.UUID, tuple[str, str]],
) -> tuple[str, str, int | None] | None:
    """What a running node's instance says: (node target, reason, exit code), or None
    while it still runs."""
    exit_code = instance.exit_code if instance else None
    if node.instance_id in others:
        kind, who = others[node.instance_id]
        verb = "stop" if "Stop" in kind else "delete"
        return N.FAILED, f"a {verb} of its instance was requested by {who}", exit_code
    if instance is None:
        return N.FAILED, "its instance vanished", None
    if instance.status == Status.STOPPED:
        if instance.exit_code == 0:
            return N.SUCCEEDED, "", 0
        return N.FAILED, f"exited with code {instance.exit_code}", instance.exit_code
    if instance.status == Status.FAILED:
        return N.FAILED, instance.status_reason or "its instance failed", exit_code
    return None


def _start(run: DagRun, actor: str) -> None:
    """pending → running, choosing the one engine that fits every template of the run."""
    templates = [_as_template(snapshot) for snapshot in run.templates.values()]
    try:
        run.runtime = runtime_select(template=templates[0], templates=templates[1:])
        run.save(update_fields=["runtime"])
    except DomainError as exc:
        record(run.id, owner_id=run.owner_id, kind="no_runtime", actor=actor, message=exc.message)
    run_move(run, R.RUNNING, actor=actor, message="started")


class _Snapshot:
    def __init__(self, data: dict[str, Any]) -> None:
        self.__dict__.update(data)
        self.pk = data.get("id")


def _as_template(snapshot: dict[str, Any]) -> _Snapshot:
    return _Snapshot(snapshot)


def _settle(
    run: DagRun,
    nodes: dict[str, DagNodeRun],
    actor: str,
    instances: dict[uuid.UUID, ContainerInstance],
) -> None:
    running = [n for n in nodes.values() if n.status == N.RUNNING and n.instance_id]
    others = requests_by_others([n.instance_id for n in running], actor=actor)
    for node in running:
        instance = instances.get(node.instance_id)
        if run.status == R.CANCELLING:
            if instance is None or instance.status in (Status.STOPPED, Status.FAILED):
                node_move(node, N.CANCELLED, actor=actor, reason=run.reason or "cancelled")
            continue
        outcome = _outcome(node, instance, others)
        if outcome is None:
            continue
        target, reason, exit_code = outcome
        if target == N.SUCCEEDED:
            node_move(node, N.SUCCEEDED, actor=actor, exit_code=exit_code)
            continue
        node_move(node, N.FAILED, actor=actor, reason=reason, exit_code=exit_code)
        if node.tries <= node.retries:
            node_move(
                node,
                N.READY,
                actor=actor,
                reason=f"retry {node.tries} of {node.retries} after: {reason}",
            )


def _propagate(run: DagRun, nodes: dict[str, DagNodeRun], actor: str) -> None:
    """Skip below final failures; make ready what may run (graph order)."""
    for spec in run.graph:
        node = nodes[spec["key"]]
        if node.status != N.WAITING:
            continue
        deps = [nodes[d] for d in spec["depends_on"]]
        blocked = next((d for d in deps if d.status in (N.FAILED, N.SKIPPED, N.CANCELLED)), None)
        if blocked is not None:
            node_move(
                node, N.SKIPPED, actor=actor, reason=f"upstream {blocked.key} {blocked.status}"
            )
        elif run.status == R.RUNNING and all(d.status == N.SUCCEEDED for d in deps):
            node_move(node, N.READY, actor=actor)


def _finish(run: DagRun, nodes: dict[str, DagNodeRun], actor: str) -> None:
    if any(n.status in NODE_OPEN for n in nodes.values()) and run.status == R.RUNNING:
        return
    if run.status == R.CANCELLING:
        if any(n.status == N.RUNNING for n in nodes.values()):
            return
        for node in nodes.values():
            if node.status in (N.WAITING, N.READY):
                node_move(node, N.CANCELLED, actor=actor, reason=run.reason or "cancelled")
        run_move(run, R.CANCELLED, actor=actor)
        return
    if run.status != R.RUNNING:
        return
    failed = sorted(
        (n for n in nodes.values() if n.status == N.FAILED),
        key=lambda n: (n.finished_at or timezone.now(), n.id),
    )
    if not failed and all(n.status == N.SUCCEEDED for n in nodes.values()):
        run_move(run, R.SUCCEEDED, actor=actor)
    else:
        first = failed[0] if failed else None
        reason = f"node {first.key} failed: {first.reason}" if first else "not every node succeeded"
        run_move(run, R.FAILED, actor=actor, reason=reason)


def _step_settle(run_id: str) -> Pass:
    """Step 1, in one transaction under the run's row lock.

    The run's instances are read once (no lock: container code moves them), for the
    settling and the cleanup alike: settling moves nodes, never instances, nor which
    attempts the nodes had.
    """
    with transaction.atomic():
        run = (
            DagRun.objects.select_for_update(of=("self",))
            .select_related("runtime", "owner")
            .filter(id=run_id)
            .first()
        )
        if run is None:
            return Pass()
        actor = runner_actor(run.id)
        nodes = {n.key: n for n in run.nodes.all()}
        ids = attempt_ids(run.id, list(nodes.values()))
        wanted = set(ids) | {n.instance_id for n in nodes.values() if n.instance_id}
        instances = instances_by_id(wanted) if wanted else {}
        if run.status == R.PENDING:
            _start(run, actor)
        if run.status in (R.RUNNING, R.CANCELLING):
            _settle(run, nodes, actor, instances)
            _propagate(run, nodes, actor)
            _finish(run, nodes, actor)
        requests, remove = _cleanup_requests(run, nodes, ids, instances)
        ready = [spec["key"] for spec in run.graph if nodes[spec["key"]].status == N.READY]
        ready = ready if run.status == R.RUNNING else []
        again = any(nodes[key].attempt > 0 for key in ready)
        first = ""
        if ready and not (again and _config()["cleanup_dag_node_containers_before_start"]):
            # The first ready node's create shares this transaction (one run lock and
            # commit less per step of a chain); the others get one each (step 2).
            deletes_coming = any(action == "delete" for _, action in requests)
            first = _create_locked(run, nodes[ready[0]], deletes_coming=deletes_coming)
            ready = ready[1:]
        return Pass(
            run=run,
            ready=[] if first == "full" else ready,
            requests=requests,
            keep=_outputs_to_keep(nodes, ids, instances, requests),
            remove_workspace=remove,
            again=again,
            first=first,
        )
