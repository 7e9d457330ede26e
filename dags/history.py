"""Moving runs and nodes between states, with their history, and waking the runner.

Callers hold the run's row lock inside a transaction (``select_for_update()``).
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from django.db import connection

from dags.models import DagEvent, DagNodeRun, DagRun
from outbox.services import outbox_enqueue_once

log = logging.getLogger(__name__)

ADVANCE = "DagRunAdvance"
START = "DagRunStart"

# What each kind of a run's history entry (``DagEvent.kind``) is called on the run page,
# in the API's ``kind_display`` and in ``dag_run_start --wait``; programs keep ``kind``
# (the containers' own are ``containers.queues.EVENT_KIND_WORDS``).
DAG_EVENT_KIND_WORDS: dict[str, str] = {
    START: "run requested",
    ADVANCE: "advanced",
    "transition": "state changed",
    "no_runtime": "no engine to run on",
    "workspace_removed": "shared volume removed",
    "recover": "taken up again after a restart",
    "advance_dead": "runner gave up",
    "output_kept": "output kept",
}


def dag_event_kind_display(kind: str) -> str:
    """``kind`` in words (a kind without an entry: its words, lower case)."""
    if kind in DAG_EVENT_KIND_WORDS:
        return DAG_EVENT_KIND_WORDS[kind]
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", kind).replace("_", " ").lower()


LABEL_DAG_RUN = "io.gobrave.dag-run"
LABEL_DAG_NODE = "io.gobrave.dag-node"
_IDS = uuid.UUID("5d1f3b0e-7a52-4c3e-9f0b-9a8d1c2e4f60")


RUNNER = "dag-runner"
RECOVERY = "dag-recovery"


def runner_actor(run_id: uuid.UUID | str) -> str:
    """The actor of every request the runner makes for a run's instances (people are
    ``user:<name>``, so it is never mistaken for one)."""
    return RUNNER


def instance_id_for(run_id: uuid.UUID | str, key: str, attempt: int) -> uuid.UUID:
    """The instance id of a node's attempt: the same on every try of the same create."""
    return uuid.uuid5(_IDS, f"{run_id}/{key}/{attempt}")


def record(
    run_id: uuid.UUID | str,
    *,
    owner_id: int | None = None,
    kind: str,
    actor: str,
    node: str = "",
    from_status: str = "",
    to_status: str = "",
    message: str = "",
    data: dict[str, Any] | None = None,
) -> DagEvent:
    """Append one entry to the run's history. ``owner_id``: the run's owner, read from the
    run when not given (the events feed shows an owner their runs' history)."""
    if owner_id is None:
        owner_id = DagRun.objects.filter(id=run_id).values_list("owner_id", flat=True).first()
    return DagEvent.objects.create(
        run_id=run_id,
        owner_id=owner_id,
        node=node,
        kind=kind,
        from_status=from_status,
        to_status=to_status,
        message=message,
        actor=actor,
        data=data or {},
    )


def _fields(obj, extra: tuple[str, ...]) -> list[str]:
    return ["status", "status_changed_at", "reason", "finished_at", *extra]


def run_move(run: DagRun, target: str, *, actor: str, message: str = "", **fields: Any) -> None:
    """Transition a locked run, save it and record the change (inside a transaction)."""
    if not connection.in_atomic_block:
        raise RuntimeError("run_move() must run inside transaction.atomic()")
    source = run.status
    getattr(run, f"mark_{target}")(**fields)
    run.save(update_fields=_fields(run, ("started_at",)))
    record(
        run.id,
        owner_id=run.owner_id,
        kind="transition",
        actor=actor,
        from_status=source,
        to_status=target,
        message=message or run.reason,
    )
    log.info("dag run %s %s -> %s by %s %s", run.id, source, target, actor, message or run.reason)


def node_move(
    node: DagNodeRun, target: str, *, actor: str, message: str = "", **fields: Any
) -> None:
    """Transition a node of a locked run, save it and record the change."""
    source = node.status
    node.transition_method(target)(**fields)
    node.save(
        update_fields=_fields(
            node, ("exit_code", "tries", "attempt", "instance_id", "instance_name", "started_at")
        )
    )
    record(
        node.run_id,
        # the run the caller locked, when the node was read through it (no query)
        owner_id=node.run.owner_id if DagNodeRun.run.is_cached(node) else None,
        node=node.key,
        kind="transition",
        actor=actor,
        from_status=source,
        to_status=target,
        message=message or node.reason,
        data={"attempt": node.attempt, "instance": str(node.instance_id or "")},
    )
    log.info(
        "dag run %s node %s %s -> %s (attempt %s) %s",
        node.run_id,
        node.key,
        source,
        target,
        node.attempt,
        message or node.reason,
    )


def advance_soon(run_id: uuid.UUID | str, *, why: str) -> None:
    """Make sure an advance of the run is due now (one pending row per run is enough).

    Runs inside the caller's transaction. Writes only an outbox row: safe from the
    containers' signals, which hold an instance lock and must never wait on a run's.
    """
    outbox_enqueue_once(kind=ADVANCE, aggregate_id=str(run_id), payload={"why": why[:200]})
