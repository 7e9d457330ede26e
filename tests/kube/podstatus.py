"""A Pod's status as the scheduler and the kubelet write it, one function per step; each
changes the Pod (a dict) it is given, for ``Store.update``. Shapes follow what a cluster's
kubelet writes: conditions with transition times, container statuses with ``waiting``,
``running`` or ``terminated`` states, ``imageID``, ``restartCount``, ``containerID``."""

from __future__ import annotations

import secrets
from typing import Any

from tests.kube.store import now

NODE_IP = "172.18.0.2"  # status strings only: nothing connects to these addresses

# What the kubelet says of a container waiting for its image, by reason.
MESSAGES = {
    "ErrImagePull": "rpc error: code = NotFound desc = failed to pull and unpack image"
    ' "{image}": not found',
    "ImagePullBackOff": 'Back-off pulling image "{image}"',
    "InvalidImageName": 'Failed to apply default image tag "{image}": couldn\'t parse image'
    ' name "{image}": invalid reference format',
}

Pod = dict[str, Any]


def unschedulable(pod: Pod, message: str) -> None:
    pod["status"]["conditions"] = [condition("PodScheduled", "False", "Unschedulable", message)]


def bound(pod: Pod, node: str) -> None:
    pod["spec"]["nodeName"] = node
    pod["status"]["conditions"] = [condition("PodScheduled", "True")]


def creating(pod: Pod) -> None:
    status = pod["status"]
    status.update(hostIP=NODE_IP, hostIPs=[{"ip": NODE_IP}], startTime=now())
    unready = "containers with unready status: " + _names(pod)
    status["conditions"] = [
        condition("PodReadyToStartContainers", "True"),
        condition("Initialized", "True"),
        condition("Ready", "False", "ContainersNotReady", unready),
        condition("ContainersReady", "False", "ContainersNotReady", unready),
        condition("PodScheduled", "True"),
    ]
    status["containerStatuses"] = [
        _container(c, {"waiting": {"reason": "ContainerCreating"}})
        for c in pod["spec"]["containers"]
    ]


def waiting(pod: Pod, reason: str, message: str | None = None) -> None:
    """Every container waits with ``reason`` (an image error's message by default)."""
    for status, container in zip(
        pod["status"]["containerStatuses"], pod["spec"]["containers"], strict=True
    ):
        text = message or MESSAGES[reason].format(image=container["image"])
        status["state"] = {"waiting": {"reason": reason, "message": text}}


def running(pod: Pod, ip: str) -> None:
    status = pod["status"]
    status.update(phase="Running", podIP=ip, podIPs=[{"ip": ip}])
    set_condition(status, "Ready", "True")
    set_condition(status, "ContainersReady", "True")
    started = now()
    status["containerStatuses"] = [
        {**_container(c, {"running": {"startedAt": started}}), "ready": True,
         "started": True, "containerID": "containerd://" + secrets.token_hex(32)}
        for c in pod["spec"]["containers"]
    ]  # fmt: skip


def terminated(pod: Pod, code: int, oom: bool) -> None:
    """Every container ended with ``code`` (``OOMKilled`` when ``oom``): the Pod has
    Succeeded (0) or Failed."""
    reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
    status = pod["status"]
    status["phase"] = "Succeeded" if code == 0 else "Failed"
    set_condition(status, "Ready", "False", "PodCompleted")
    set_condition(status, "ContainersReady", "False", "PodCompleted")
    for container in status.get("containerStatuses") or []:
        started = container["state"].get("running", {}).get("startedAt", now())
        container.update(ready=False, started=False)
        container["state"] = {"terminated": {
            "exitCode": code, "reason": reason, "startedAt": started,
            "finishedAt": now(), "containerID": container.get("containerID", ""),
        }}  # fmt: skip


def node_lost(pod: Pod, node: str) -> None:
    """What the node controller writes when the Pod's node stops reporting."""
    status = pod["status"]
    name = pod["metadata"]["name"]
    status.update(
        phase="Unknown",
        reason="NodeLost",
        message=f"Node {node} which was running pod {name} is unresponsive",
    )
    set_condition(status, "Ready", "Unknown", "NodeStatusUnknown",
                  "Kubelet stopped posting node status.")  # fmt: skip


def scheduled_message(status: dict[str, Any]) -> str | None:
    """The message of a ``PodScheduled`` False condition, if the Pod has one."""
    for found in status.get("conditions") or []:
        if found["type"] == "PodScheduled" and found["status"] == "False":
            return found.get("message")
    return None


def condition(type_: str, status: str, reason: str | None = None, message: str | None = None):
    made = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": now()}
    if reason:
        made["reason"] = reason
    if message:
        made["message"] = message
    return made


def set_condition(status: dict[str, Any], type_: str, value: str, reason=None, message=None):
    conditions = status.setdefault("conditions", [])
    for i, found in enumerate(conditions):
        if found["type"] == type_:
            conditions[i] = condition(type_, value, reason, message)
            return
    conditions.append(condition(type_, value, reason, message))


def _names(pod: Pod) -> str:
    return "[" + " ".join(c["name"] for c in pod["spec"]["containers"]) + "]"


def _container(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": state,
        "lastState": {},
    }
