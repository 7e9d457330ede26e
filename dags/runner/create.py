"""Step 2, create: each ready node's instance, one node per short transaction
(``_create_one``, ``_create_locked``), waiting while the queue or a quota is full and
room may free."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction

from containers.errors import InstanceQuotaExceeded, OwnerQuotaExceeded, QueueFull
from containers.execution.housekeeping import containers_remove_unowned
from containers.models import ContainerInstance
from containers.requests.services import container_create_by_template
from containers.states import IN_FLIGHT
from core.errors import DomainError
from dags.history import LABEL_DAG_NODE, LABEL_DAG_RUN, instance_id_for, node_move, runner_actor
from dags.models import DagNodeRun, DagRun
from dags.runner.passes import N, Pass, R, _config
from dags.selectors import live_template

log = logging.getLogger(__name__)


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
