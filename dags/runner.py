"""The runner: advance a DAG run from its stored state (contract §7).

``dag_run_advance`` is the handler of the ``DagRunAdvance`` outbox kind (control queue,
aggregate = the run). It is idempotent and derives everything from what is stored: the
run, its nodes, and their instances as the containers app keeps them. Whatever settles
or removes a node's instance asks for an advance (``dags.receivers``). Steps:

1. **Settle** (one short transaction, the run's row locked): start a pending run (pick
   its one engine); settle every running node from its instance (exit 0 → succeeded;
   non-zero exit, instance failed, vanished, or stopped/deleted by anyone but the runner
   → failed with the reason; while cancelling → cancelled); give a failed node with a
   retry left a new attempt (``ready``); skip what lies below a node that failed for
   good; make ready the nodes whose dependencies all succeeded; end the run when no
   node can move.
2. **Create** ready nodes, one node per short transaction (run locked, then the normal
   create service, which takes the admission gate last; the first ready node's in step
   1's own transaction, unless leftovers must be removed first): the instance id is derived
   from (run, node, attempt). ``queue_full`` (or a quota refusal, ``owner_quota`` or
   ``quota_exceeded``, while the owner has something in flight that may free room)
   leaves the node ready and defers the advance; a refusal that waiting cannot cure
   fails the node, and step 1 runs again.
3. **Clean up** (no run lock; each request its own transaction through the container
   services): the stop or delete requests that the config and the node states call for
   (cancel, ``delete_container_on_node_success``, ``dag_node_cleanup_on_failed``,
   ``dag_node_cleanup_on_dag_finished``), each failed attempt's output first kept on its
   node (its last 64 KiB, one bounded engine call, or a note why not) before the delete
   of its container is asked for, and the run's workspace once a finished run's
   instances are all gone under ``delete``. After the creates, so the next node waits
   on nothing else; a crash between them only delays the cleanup to the next advance.
Container code never locks a run; the runner locks a run, then (in the create) the
admission gate, never the reverse.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from containers.engines.calls import container_output_tail
from containers.errors import InstanceQuotaExceeded, OwnerQuotaExceeded, QueueFull
from containers.execution.housekeeping import containers_remove_unowned, volume_remove
from containers.models import ContainerInstance
from containers.placement.choice import runtime_select
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_stop,
)
from containers.states import IN_FLIGHT, Status
from core.errors import DomainError
from dags.history import (
    LABEL_DAG_NODE,
    LABEL_DAG_RUN,
    RECOVERY,
    advance_soon,
    instance_id_for,
    node_move,
    record,
    run_move,
    runner_actor,
)
from dags.models import DagNodeRun, DagRun
from dags.selectors import attempt_ids, instances_by_id, live_template, requests_by_others
from dags.services import dag_node_output_keep
from dags.states import NODE_OPEN, NodeStatus, RunStatus
from outbox import conf as outbox_conf
from outbox.liveness import COLD_AFTER
from outbox.outcomes import Outcome
from outbox.registry import Defer

log = logging.getLogger(__name__)

N, R = NodeStatus, RunStatus
STOPPABLE = frozenset({Status.RUNNING, Status.PAUSED})
DELETABLE = frozenset(
    {
        Status.PENDING,
        Status.CREATING,
        Status.RUNNING,
        Status.PAUSED,
        Status.STOP_PENDING,
        Status.STOPPING,
        Status.STOPPED,
        Status.FAILED,
    }
)
SETTLED_WELL = frozenset({N.RUNNING, N.SUCCEEDED, N.CANCELLED})  # of a current attempt
POLICY_RANK = {"none": 0, "stop": 1, "delete": 2}
NOT_RECOVERED = "not recovered at start"
RECOVERED_AT_START = "advanced again from its stored state: the whole installation had been down"
MAX_ROUNDS = 5


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


@dataclass
class Pass:
    """What step 1 decided for steps 2 and 3."""

    run: DagRun | None = None
    ready: list[str] = field(default_factory=list)
    requests: list[tuple[uuid.UUID, str]] = field(default_factory=list)  # (instance, stop|delete)
    # (instance, key, attempt): failed attempts whose output is kept before their delete
    keep: list[tuple[ContainerInstance, str, int]] = field(default_factory=list)
    remove_workspace: bool = False
    again: bool = False  # a ready node had an instance before (a retry, a lost row)
    first: str = ""  # what creating the first ready node in step 1 gave (``_create_one``)


# --- step 1: settle -----------------------------------------------------------------------


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


def _cleanup_requests(
    run: DagRun,
    nodes: dict[str, DagNodeRun],
    ids: dict[uuid.UUID, tuple[str, int]],
    instances: dict[uuid.UUID, ContainerInstance],
) -> tuple[list, bool]:
    """(instance, stop|delete) requests the state and the config call for, and whether
    the run's workspace is to be removed now. ``ids``: every instance id the run's nodes
    had (``attempt_ids``); ``instances``: those that still exist."""
    config = _config()
    finished = run.status in (R.SUCCEEDED, R.FAILED, R.CANCELLED)
    at_end = config["dag_node_cleanup_on_dag_finished"] if finished else "none"
    requests = []
    for instance_id, (key, attempt) in ids.items():
        instance = instances.get(instance_id)
        if instance is None:
            continue
        node = nodes[key]
        current = attempt == node.attempt
        if run.status == R.CANCELLING and current and node.status == N.RUNNING:
            policy = "delete" if instance.status in (Status.PENDING, Status.CREATING) else "stop"
        elif current and node.status == N.RUNNING:
            continue
        elif current and node.status == N.SUCCEEDED:
            policy = "delete" if config["delete_container_on_node_success"] else "none"
        elif current and node.status == N.CANCELLED:
            policy = "none"
        else:  # a failed attempt: the node's last, or one it retried
            policy = config["dag_node_cleanup_on_failed"]
        if POLICY_RANK[at_end] > POLICY_RANK[policy]:
            policy = at_end
        if policy == "delete" and instance.status in DELETABLE:
            requests.append((instance_id, "delete"))
        elif policy == "stop" and instance.status in STOPPABLE:
            requests.append((instance_id, "stop"))
    remove = (
        finished
        and at_end == "delete"
        and not instances
        and run.workspace_removed_at is None
        and run.runtime_id is not None
    )
    return requests, remove


def _outputs_to_keep(
    nodes: dict[str, DagNodeRun],
    ids: dict[uuid.UUID, tuple[str, int]],
    instances: dict[uuid.UUID, ContainerInstance],
    requests: list[tuple[uuid.UUID, str]],
) -> list[tuple[ContainerInstance, str, int]]:
    """The failed attempts whose container is about to be deleted and whose output the
    node does not hold yet: (instance, key, attempt), the latest such attempt of a node.
    An attempt that is not the node's current one failed (only a failure makes another)."""
    latest: dict[str, tuple[ContainerInstance, str, int]] = {}
    for instance_id, action in requests:
        key, attempt = ids[instance_id]
        node = nodes[key]
        settled_well = attempt == node.attempt and node.status in SETTLED_WELL
        if action != "delete" or settled_well or (node.output_attempt or 0) >= attempt:
            continue
        if key not in latest or latest[key][2] < attempt:
            latest[key] = (instances[instance_id], key, attempt)
    return list(latest.values())


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


# --- step 3: clean up -------------------------------------------------------------------


def _step_cleanup(work: Pass) -> None:
    run = work.run
    actor = runner_actor(run.id)
    for instance, key, attempt in work.keep:  # before its delete is asked for
        output = container_output_tail(instance=instance)
        dag_node_output_keep(run_id=run.id, key=key, attempt=attempt, output=output, actor=actor)
    for instance_id, action in work.requests:
        request = container_delete if action == "delete" else container_stop
        try:
            request(instance_id=instance_id, actor=actor)
        except DomainError as exc:  # it moved on meanwhile: the next advance looks again
            log.info("dag run %s: %s of %s refused: %s", run.id, action, instance_id, exc)
    if work.remove_workspace:
        containers_remove_unowned(
            runtime=run.runtime, labels={LABEL_DAG_RUN: str(run.id)}, actor=actor
        )
        volume_remove(runtime=run.runtime, name=run.workspace_name)
        with transaction.atomic():
            locked = DagRun.objects.select_for_update().get(id=run.id)
            locked.workspace_removed_at = timezone.now()
            locked.save(update_fields=["workspace_removed_at"])
            record(
                run.id,
                owner_id=run.owner_id,
                kind="workspace_removed",
                actor=actor,
                message=run.workspace_name,
            )


# --- step 2: create ---------------------------------------------------------------------


def _owner_has_work_in_flight(run: DagRun, *, deletes_coming: bool) -> bool:
    """Could room for the owner free up by waiting? True while any of their instances
    is in flight (being deleted included), a node of one of their runs still runs, or
    this advance is about to delete instances (``deletes_coming``: its step 3 runs after
    the creates, e.g. the instance of the node that just succeeded)."""
    if deletes_coming:
        return True
    if ContainerInstance.objects.filter(owner_id=run.owner_id, status__in=IN_FLIGHT).exists():
        return True
    return DagNodeRun.objects.filter(run__owner_id=run.owner_id, status=N.RUNNING).exists()


def _node_spec(run: DagRun, spec: dict[str, Any]) -> dict[str, Any]:
    snapshot = dict(run.templates[str(spec["template"])])
    if spec.get("command"):
        snapshot["command"] = spec["command"]
    snapshot["env"] = {
        **(snapshot.get("env") or {}),
        **(spec.get("env") or {}),
        "DAG_RUN_ID": str(run.id),
        "DAG_NODE": spec["key"],
    }
    return snapshot


def _create_one(run_id: uuid.UUID, key: str, *, deletes_coming: bool = False) -> str:
    """Create one ready node's instance in its own transaction.

    Returns ``created``, ``skipped`` (no longer ready), ``full`` (wait and ask again) or
    ``failed`` (refused for good: the node failed). ``deletes_coming``: this advance
    will delete instances after its creates (room for a quota refusal).
    """
    with transaction.atomic():
        run = DagRun.objects.select_for_update().filter(id=run_id).first()
        if run is None or run.status != R.RUNNING:
            return "skipped"
        node = run.nodes.filter(key=key).first()
        if node is None or node.status != N.READY:
            return "skipped"
        return _create_locked(run, node, deletes_coming=deletes_coming)


def _create_locked(run: DagRun, node: DagNodeRun, *, deletes_coming: bool) -> str:
    """``_create_one``'s work on a run locked by the caller, inside its transaction."""
    key = node.key
    actor = runner_actor(run.id)
    spec = next(s for s in run.graph if s["key"] == key)
    attempt = node.attempt + 1
    instance_id = instance_id_for(run.id, key, attempt)
    template = live_template(int(spec["template"]), owner=run.owner)
    try:
        if template is None:
            raise DomainError(f"template {spec['template']} no longer exists")
        if run.runtime_id is None:
            raise DomainError("no enabled runtime matches every template of the run")
        with transaction.atomic():
            instance = container_create_by_template(
                template=template,
                owner=run.owner,
                actor=actor,
                name=f"{str(run.id)[:8]}-{key}-{attempt}",
                instance_id=instance_id,
                runtime=run.runtime,
                snapshot=_node_spec(run, spec),
                extra_labels={LABEL_DAG_RUN: str(run.id), LABEL_DAG_NODE: key},
                extra_mounts=[{"type": "volume", "source": run.workspace_name, "target": "/dag"}],
                exempt_from_policies=True,  # the run's own cleanup policies apply
            )
    except QueueFull as exc:
        log.info("dag run %s node %s waits: %s", run.id, key, exc.message)
        return "full"
    except DomainError as exc:
        # A quota refusal waits while a pending create or a delete (ours or the owner's)
        # may free room; with nothing in flight it is final for this node.
        quota = isinstance(exc, (OwnerQuotaExceeded, InstanceQuotaExceeded))
        if quota and _owner_has_work_in_flight(run, deletes_coming=deletes_coming):
            log.info("dag run %s node %s waits: %s", run.id, key, exc.message)
            return "full"
        node.attempt = attempt
        node.tries += 1
        node_move(node, N.FAILED, actor=actor, reason=f"create refused: {exc.message}"[:2000])
        return "failed"
    node.attempt = attempt
    node.tries += 1
    node_move(node, N.RUNNING, actor=actor, instance_id=instance.id, instance_name=instance.name)
    return "created"


def _step_create(work: Pass) -> tuple[bool, bool]:
    """Step 2. Returns (something failed at once, the queue was full).

    Leftover containers can exist only for a node that had an instance before (its
    earlier attempt's, or a crash's whose row was lost): only then is the engine asked.
    """
    run = work.run
    cleanup = _config()["cleanup_dag_node_containers_before_start"]
    if cleanup and work.again and run.runtime is not None:
        containers_remove_unowned(
            runtime=run.runtime, labels={LABEL_DAG_RUN: str(run.id)}, actor=runner_actor(run.id)
        )
    failed = full = False
    deletes_coming = any(action == "delete" for _, action in work.requests)
    for key in work.ready:
        result = _create_one(run.id, key, deletes_coming=deletes_coming)
        failed |= result == "failed"
        if result == "full":
            full = True
            break
    return failed, full


def dag_run_advance(*, run_id: str) -> Outcome:
    """Advance one run as the module docstring says. Must run outside a transaction.

    Idempotent. Raises ``Defer`` when a node waits for room in the create queue (the
    relay asks again after ``poll_interval``, or sooner when something settles).
    """
    full = False
    work = Pass()
    for _ in range(MAX_ROUNDS):
        work = _step_settle(run_id)
        if work.run is None:
            return Outcome.SUPERSEDED
        failed, full = work.first == "failed", work.first == "full"
        if work.ready:  # creates first: the next node waits on nothing else
            more_failed, full = _step_create(work)
            failed |= more_failed
        _step_cleanup(work)
        if not failed:
            break
    if full:
        raise Defer(f"dag run {run_id}: the create queue is full; nodes wait")
    return Outcome.SENT


def dag_runs_at_cold_start() -> None:
    """At a cold start (``outbox.liveness``), under the start lock: advance every active
    run again from stored state (``recover_running_dag_on_start``), or fail it with the
    reason "not recovered at start" and let the runner clean up by the policies.

    Only runs that nothing moved during the cold window are the crash's: a run (or one
    of its nodes) that changed within it is in the hands of workers alive now (they
    claim rows without a dispatcher), and is left to them.
    """
    recover = _config()["recover_running_dag_on_start"]
    quiet = Now() - dt.timedelta(seconds=COLD_AFTER * outbox_conf.value("poll_interval"))
    runs = (
        DagRun.objects.select_for_update()
        .filter(status__in=[R.PENDING, R.RUNNING, R.CANCELLING], status_changed_at__lt=quiet)
        .exclude(nodes__status_changed_at__gte=quiet)
    )
    for run in runs:
        if recover or run.status == R.PENDING:
            record(
                run.id,
                owner_id=run.owner_id,
                kind="recover",
                actor=RECOVERY,
                message=RECOVERED_AT_START,
            )
        else:
            for node in run.nodes.all():
                if node.status in (N.RUNNING, N.READY):
                    node_move(node, N.FAILED, actor=RECOVERY, reason=NOT_RECOVERED)
                elif node.status == N.WAITING:
                    node_move(node, N.SKIPPED, actor=RECOVERY, reason=NOT_RECOVERED)
            run_move(run, R.FAILED, actor=RECOVERY, reason=NOT_RECOVERED)
        advance_soon(run.id, why="installation restarted")
