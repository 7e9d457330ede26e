"""What the chaos soak checks once everything is quiet, and the recoveries it measures.

Each check returns ``(violations, explained)``: a violation is a broken guarantee; an
explained outcome is one that ended failed with a reason (a request, a dead letter with
its error, a DAG run). ``only_engine_limits`` then keeps as explained only those an
engine limit accounts for; every other one is a violation too.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.db.models.functions import Now

from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from containers.models import ContainerInstance
from containers.queues import RequestKind
from containers.states import IN_FLIGHT
from dags.models import DagRun
from dags.states import RUN_ACTIVE, RunStatus
from outbox.models import OutboxEvent, OutboxStatus
from outbox.outcomes import Outcome
from tests.processes import outbox_rows

# What the last request asks for (contract §2): its state, or the instance gone.
TARGET = {"create": "running", "start": "running", "stop": "stopped", "delete": "gone"}
KIND_OF = {
    RequestKind.CREATE: "create",
    RequestKind.START: "start",
    RequestKind.STOP: "stop",
    RequestKind.DELETE: "delete",
}
UNFINISHED = (OutboxStatus.PENDING, OutboxStatus.PROCESSING)


def quiet() -> bool:
    """Nothing left to do: no request unfinished, no instance in flight, no run active."""
    return not (
        OutboxEvent.objects.filter(status__in=UNFINISHED).exists()
        or ContainerInstance.objects.filter(status__in=IN_FLIGHT).exists()
        or DagRun.objects.filter(status__in=RUN_ACTIVE).exists()
    )


def unquiet() -> str:
    """What still moves, for a quiesce that timed out."""
    busy = ContainerInstance.objects.filter(status__in=IN_FLIGHT).values_list(
        "id", "status", "status_reason"
    )
    runs = DagRun.objects.filter(status__in=RUN_ACTIVE).values_list("id", "status", "reason")
    rows = outbox_rows(OutboxEvent.objects.filter(status__in=UNFINISHED))
    return f"instances in flight: {list(busy)}\nruns active: {list(runs)}\nrows:\n{rows}"


def _requests_in_rows(instance_id: str) -> list[str]:
    kinds = OutboxEvent.objects.filter(aggregate_id=instance_id).order_by("id")
    return [KIND_OF[k] for k in kinds.values_list("kind", flat=True) if k in KIND_OF]


def final_states(tracked, engine_containers: dict[str, list[dict]]) -> tuple[list, list]:
    """Every instance the traffic made ended where its last accepted request asks.

    An instance whose last answer was lost with the connection is judged by the rows:
    the requests that committed are exactly those with an outbox row.
    """
    violations, explained = [], []
    stored = {
        str(row["id"]): row
        for row in ContainerInstance.objects.filter(id__in=list(tracked)).values(
            "id", "status", "status_reason", "exit_code"
        )
    }
    for instance_id, item in tracked.items():
        in_rows = _requests_in_rows(instance_id)
        if not item.ambiguous and in_rows != item.accepted:
            violations.append(
                f"{instance_id}: accepted {item.accepted} but the outbox holds {in_rows}"
            )
        last = in_rows[-1] if in_rows else "delete"  # a create that never committed: none
        target = TARGET[last]
        row = stored.get(instance_id)
        containers = engine_containers.get(instance_id, [])
        story = f"{instance_id} ({item.owner}, requests {in_rows})"
        if target == "gone":
            if row is not None or containers:
                violations.append(
                    f"{story}: should be gone, is {row} with {len(containers)} containers"
                )
            continue
        if row is None:
            violations.append(f"{story}: should be {target}, the instance is gone")
        elif row["status"] == target:
            state = containers[0]["State"] if len(containers) == 1 else None
            if (state == "running") != (target == "running"):
                violations.append(f"{story}: {target} but its container is {state}")
        elif row["status"] == "failed" and row["status_reason"]:
            explained.append(f"{story}: failed (wanted {target}): {row['status_reason'][:300]}")
        else:
            violations.append(f"{story}: should be {target}, is {row}")
    return violations, explained


# What an injected fault may leave failed, by the text its reason carries and the fault
# that must have struck for it: limits of the engine, not of gobrave. A stopped container
# whose start a daemon restart cut holds a stale task no engine call can clear (contract
# §4). A container that exits while its daemon shuts down loses its exit status: the
# restarted daemon reports code 255 (reproduced with a private dockerd, ``sleep 1``
# exiting as SIGTERM reached the daemon: 1 exit in 12 timed across a restart).
# Anything else that ended failed, dead or not succeeded is a violation: the soak's
# image and specs are sound, so every other failure is gobrave's.
ENGINE_LIMITS = (
    ("can no longer be started", None),
    ("exited with code 255", "dockerd"),
)


def only_engine_limits(explained: list[str], struck: set[str]) -> tuple[list[str], list[str]]:
    """Split the explained outcomes: ``(violations, still explained)``; ``struck`` holds
    the kinds of fault that struck."""
    allowed = [
        line
        for line in explained
        if any(text in line and (kind is None or kind in struck) for text, kind in ENGINE_LIMITS)
    ]
    return [f"failure no fault explains: {line}" for line in explained if line not in allowed], (
        allowed
    )


def containers_by_instance(client, installation: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = defaultdict(list)
    label = f"{LABEL_INSTALLATION}={installation}"
    for container in client.containers(all=True, filters={"label": label}):
        found[container["Labels"].get(LABEL_INSTANCE, "")].append(container)
    return dict(found)


def engine_matches(engine_containers: dict[str, list[dict]]) -> list[str]:
    """No instance has two containers; no container of ours lacks an instance."""
    violations = []
    ids = {str(pk) for pk in ContainerInstance.objects.values_list("id", flat=True)}
    for instance_id, containers in engine_containers.items():
        names = [c["Names"][0] for c in containers]
        if len(containers) > 1:
            violations.append(f"instance {instance_id} has {len(containers)} containers: {names}")
        if instance_id not in ids:
            violations.append(f"container {names} has no instance {instance_id!r}")
    return violations


def rows_settled() -> tuple[list, list]:
    """No row in ``processing`` past its lease (nor unfinished at all); dead rows explained."""
    violations = []
    expired = OutboxEvent.objects.filter(status=OutboxStatus.PROCESSING, lease_expires_at__lt=Now())
    if expired.exists():
        violations.append(f"rows processing past their lease:\n{outbox_rows(expired)}")
    unfinished = OutboxEvent.objects.filter(status__in=UNFINISHED)
    if unfinished.exists():
        violations.append(f"rows unfinished after quiescing:\n{outbox_rows(unfinished)}")
    dead = OutboxEvent.objects.filter(status=OutboxStatus.DEAD)
    explained = [f"dead letter: {line}" for line in outbox_rows(dead).splitlines()]
    return violations, explained


def dag_runs_finished(run_ids: list[str]) -> tuple[list, list]:
    violations, explained = [], []
    for run in DagRun.objects.filter(id__in=run_ids).order_by("created_at"):
        if run.status == RunStatus.SUCCEEDED:
            continue
        line = f"DAG run {run.pk}: {run.status} ({run.reason})"
        if run.status in RUN_ACTIVE or not run.reason:
            violations.append(line)
        else:
            explained.append(line)
    return violations, explained


# --- recoveries -------------------------------------------------------------------------


def _seconds(later: dt.datetime | None, earlier: dt.datetime) -> float | None:
    return None if later is None else (later - earlier).total_seconds()


def recoveries(faults) -> list[dict]:
    """Per fault: seconds to the process back, and to the next container request that
    began after the fault and was handled (not superseded: it did reach the engine) on
    the queue the fault hit; for a busy worker, to the request it held done."""
    out = []
    for fault in faults:
        after = OutboxEvent.objects.filter(
            started_at__gte=fault.at, kind__in=list(KIND_OF), outcome=Outcome.SENT
        )
        if fault.queue:
            after = after.filter(queue=fault.queue)
        first = after.order_by("sent_at").values_list("sent_at", flat=True).first()
        entry = {
            "kind": fault.kind,
            "target": fault.target,
            "at": fault.at.isoformat(timespec="seconds"),
            "back_s": fault.back_s,
            "next_done_s": _seconds(first, fault.at),
            "note": fault.note,
        }
        if fault.instance:
            killed = (
                OutboxEvent.objects.filter(aggregate_id=fault.instance, sent_at__gt=fault.at)
                .order_by("id")
                .values_list("sent_at", flat=True)
                .first()
            )
            entry["killed_request_done_s"] = _seconds(killed, fault.at)
        out.append(entry)
    return out
