"""Step 3, clean up: the stop and delete requests the config and the node states call
for, a failed attempt's output kept first, and the run's workspace removed at the end."""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.utils import timezone

from containers.engines.calls import container_output_tail
from containers.execution.housekeeping import containers_remove_unowned, volume_remove
from containers.models import ContainerInstance
from containers.requests.services import container_delete, container_stop
from containers.states import Status
from core.errors import DomainError
from dags.history import LABEL_DAG_RUN, record, runner_actor
from dags.models import DagNodeRun, DagRun
from dags.runner.passes import DELETABLE, POLICY_RANK, SETTLED_WELL, STOPPABLE, N, Pass, R, _config
from dags.services import dag_node_output_keep

log = logging.getLogger(__name__)


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
