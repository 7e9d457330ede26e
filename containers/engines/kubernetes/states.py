"""A Pod as a ``ContainerState``: the state table of docs/kubernetes.md ("State
mapping"), which ``tests/engines/test_kubernetes.py`` holds to this code's ``TABLE``.

The ``ContainerState.status`` values are the engine-neutral ones ``observe.target_for``
reads: ``created`` (nothing new: the Pod waits, ``error`` says for what), ``running``,
``exited`` (with the exit code; ``oom_killed``), ``rejected`` (the cluster will never run
it: ``error`` says why; the instance fails), ``unknown`` (no word from its node: the
instance keeps its state) and ``removing`` (being deleted). Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from containers.engines.base import ContainerState
from containers.engines.kubernetes import names

# Pull errors no retry can fix: the registry says the image or tag is not there.
_IMAGE_ABSENT = re.compile(
    r"manifest unknown|name unknown|repository does not exist|not found|invalid reference",
    re.IGNORECASE,
)
WAITING_FOR_NODE = "waiting for a node"

# (what the Pod says, the status gobrave reads, what the instance does): the docs' table.
TABLE = (
    ("Pending, PodScheduled False (Unschedulable)", "created",
     'waits; reason "waiting for a node: <the scheduler\'s message>"'),
    ("Pending, container waiting (ContainerCreating, a pull in progress)", "created", "waits"),
    ("Pending, ErrImagePull / ImagePullBackOff with a missing image or tag", "rejected",
     "failed, with the kubelet's message"),
    ("Pending, InvalidImageName", "rejected", "failed, with the kubelet's message"),
    ("Pending, ErrImagePull / ImagePullBackOff, registry unreachable", "created",
     "waits (the kubelet retries)"),
    ("Running, container running", "running", "running"),
    ("Succeeded / Failed, container terminated", "exited",
     "stopped (exit 0, or asked to stop) or failed with the exit code"),
    ("Failed, container terminated with reason OOMKilled", "exited", "failed, reason OOMKilled"),
    ("Unknown (the node stopped reporting)", "unknown",
     'keeps its state, reason "no word from its node: …" (the reconciler); past engine_lost_after'
     ' failed, "engine lost: …"'),
    ("being deleted (deletionTimestamp set)", "removing", "keeps its state"),
    ("no Pod", "(none)", "stopped: normal after a stop; otherwise removed outside gobrave"),
)  # fmt: skip


def _time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == names.CONTAINER:
            return status
    return {}


def _unschedulable(pod: dict[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return f"{WAITING_FOR_NODE}: {condition.get('message') or 'no node fits'}"
    return ""


def state_of(pod: dict[str, Any]) -> ContainerState:
    """What ``pod`` (the API's JSON) says, as the engine-neutral state (see ``TABLE``)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    container = _container(pod)
    current = container.get("state") or {}
    base = {
        "runtime_id": meta.get("name", ""),
        "name": meta.get("name", ""),
        "labels": names.labels_of(meta),
        "node_name": (pod.get("spec") or {}).get("nodeName") or "",
    }
    terminated = current.get("terminated")
    if meta.get("deletionTimestamp") and not terminated:
        return ContainerState(status="removing", **base)
    if terminated or phase in ("Succeeded", "Failed"):
        terminated = terminated or {}
        code = terminated.get("exitCode")
        reason = terminated.get("reason") or ""
        return ContainerState(
            status="exited",
            exit_code=int(code) if code is not None else (0 if phase == "Succeeded" else 1),
            oom_killed=reason == "OOMKilled",
            error=(terminated.get("message") or status.get("message") or "")
            if reason != "Completed"
            else "",
            started_at=_time(terminated.get("startedAt")),
            finished_at=_time(terminated.get("finishedAt")),
            **base,
        )
    if phase == "Unknown":
        return ContainerState(
            status="unknown", error="the node stopped reporting (Pod Unknown)", **base
        )
    if current.get("running") and phase == "Running":
        return ContainerState(
            status="running", started_at=_time(current["running"].get("startedAt")), **base
        )
    waiting = current.get("waiting") or {}
    reason, message = waiting.get("reason") or "", waiting.get("message") or ""
    if reason == "InvalidImageName" or (
        reason in ("ErrImagePull", "ImagePullBackOff") and _IMAGE_ABSENT.search(message)
    ):
        return ContainerState(
            status="rejected", error=f"cannot pull image: {reason}: {message}".strip(), **base
        )
    unschedulable = _unschedulable(pod)
    if unschedulable:
        return ContainerState(status="created", error=unschedulable, waiting=True, **base)
    error = f"{reason}: {message}".strip(": ") if reason else ""
    return ContainerState(status="created", error=error, **base)
