"""``FakeKubelet``: a thread that plays the scheduler and one node's kubelet for the Pods
the emulator holds, writing their status as the real ones write it.

A Pod goes, one write (one watch event) per step:
1. unbound -> bound: ``spec.nodeName``, condition ``PodScheduled`` True, its Pending
   claims Bound, an Event ``Scheduled`` (or, on an ``unschedulable`` rule, a missing
   claim or a ``nodeSelector`` the node's labels do not meet: ``PodScheduled`` False with
   reason ``Unschedulable`` and the message, an Event ``FailedScheduling``, and nothing
   more until that changes);
2. ``Pending`` with the containers ``waiting: ContainerCreating``, ``hostIP``,
   ``startTime`` (an ``image_error`` rule stops here with ``waiting: ErrImagePull`` ->
   ``ImagePullBackOff``, or ``InvalidImageName``; an image reference with upper-case
   letters or blanks is always ``InvalidImageName``; a Secret or key an env var needs
   and lacks gives ``CreateContainerConfigError`` until it exists);
3. ``Running``: containers ``running``, ``ready``, ``podIP``, condition Ready True, an
   Event ``Started``; the rule's log lines are written;
4. on the rule's outcome, after ``after_ms`` or on ``trigger()``: ``Succeeded`` (exit 0,
   ``Completed``) or ``Failed`` (``Error`` with the exit code, or ``OOMKilled`` with 137),
   or a lost node: phase ``Unknown``, reason ``NodeLost``, condition Ready ``Unknown``;
   with no outcome the Pod runs until deleted.
A Pod marked for deletion (``deletionTimestamp``) is removed on the next step, its
containers having stopped at once (the grace period is not waited out); a Pod on a lost
node stays until a delete with grace period 0, as on a cluster.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.kube.status import ApiError
from tests.kube.store import Store, now

NODE = "kube-node-1"
NODE_IP = "172.18.0.2"  # status strings only: nothing connects to these addresses
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
_MESSAGES = {
    "ErrImagePull": "rpc error: code = NotFound desc = failed to pull and unpack image"
    ' "{image}": not found',
    "ImagePullBackOff": 'Back-off pulling image "{image}"',
    "InvalidImageName": 'Failed to apply default image tag "{image}": couldn\'t parse image'
    ' name "{image}": invalid reference format',
}
_VALID_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")


PodKey = tuple[str, str]  # namespace, name


@dataclass
class Rule:
    """What happens to the Pods a rule matches (by ``name``, or by every label in
    ``labels``); the most recent matching rule wins."""

    name: str | None = None
    labels: dict[str, str] | None = None
    unschedulable: str | None = None  # PodScheduled False with this message
    image_error: str | None = None  # one of IMAGE_ERRORS
    exit_code: int | None = None  # the containers terminate with this code
    oom: bool = False  # the containers are OOMKilled (exit 137)
    node_lost: bool = False  # the node stops reporting: phase Unknown
    after_ms: int = 0  # when the outcome comes, counted from Running
    on_trigger: bool = False  # the outcome waits for trigger(pod name)
    logs: list[str] = field(default_factory=list)  # written when the Pod runs
    usage: dict[str, str] | None = None  # PodMetrics usage, {"cpu": "50m", "memory": "64Mi"}

    def matches(self, pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        if self.name is not None and meta["name"] != self.name:
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in (self.labels or {}).items())

    @property
    def has_outcome(self) -> bool:
        return self.exit_code is not None or self.oom or self.node_lost


@dataclass
class _Seen:
    """The kubelet's own memory of one Pod (by uid)."""

    due: float | None = None  # monotonic time of the outcome
    triggered: bool = False
    lost: bool = False


class FakeKubelet:
    """Start with ``start()``; ``add_rule(...)`` before the Pod is created. Woken by every
    change in the store (and by its own deadlines); it writes through the store, so its
    writes appear in watches but not in ``Emulator.calls``."""

    def __init__(self, store: Store, node: str = NODE) -> None:
        self.store = store
        self.node = node
        self._rules: list[Rule] = []
        self._seen: dict[str, _Seen] = {}
        self._triggers: set[tuple[str, str]] = set()
        self._wake = threading.Condition()
        self._woken = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._ips = 0
        self.node_labels = _node_labels(node)
        self._cursor = 0  # the store's version the kubelet has seen up to
        self._rescan = True
        self._pending: set[PodKey] = set()  # looked at on the next step
        self._due: dict[PodKey, float] = {}  # looked at when the time comes (monotonic)
        self._blocked: set[PodKey] = set()  # waiting for a Secret or a claim
        self.busy_seconds = 0.0  # time spent stepping Pods (a benchmark subtracts it)
        self.errors: list[str] = []  # writes the store refused, for a failing test to print

    # -- what a test sets ------------------------------------------------------------------

    def add_rule(self, **kwargs: Any) -> Rule:
        """``add_rule(name="p", exit_code=3, after_ms=50)``; see ``Rule``."""
        rule = Rule(**kwargs)
        if rule.image_error not in (None, *IMAGE_ERRORS):
            raise ValueError(f"image_error must be one of {IMAGE_ERRORS}")
        with self._wake:
            self._rules.append(rule)
            self._rescan = True
        self._poke()
        return rule

    def set_node_labels(self, **labels: str) -> None:
        """Add labels to the node (``set_node_labels(disktype="ssd")``): Pods waiting for a
        ``nodeSelector`` they meet are scheduled."""
        with self._wake:
            self.node_labels.update(labels)
            self._rescan = True
        self._poke()

    def trigger(self, namespace: str, name: str) -> None:
        """Let the outcome of an ``on_trigger`` rule happen to Pod ``name`` now."""
        with self._wake:
            self._triggers.add((namespace, name))
            self._pending.add((namespace, name))
        self._poke()

    def finish(self, namespace: str, name: str, exit_code: int = 0, *, oom: bool = False) -> None:
        """Terminate a running Pod's containers now (``Succeeded``/``Failed``)."""
        self._finish(namespace, name, 137 if oom else exit_code, oom)

    def lose_node(self, namespace: str, name: str) -> None:
        """The node under Pod ``name`` stops reporting: phase ``Unknown`` from now on."""
        pod = self.store.get("pods", namespace, name)
        with self._wake:
            self._seen.setdefault(pod["metadata"]["uid"], _Seen()).lost = True
        self._lose(namespace, name)

    def write_log(
        self,
        namespace: str,
        name: str,
        text: str,
        container: str | None = None,
        at: datetime | None = None,
    ) -> None:
        """Append lines to a Pod's container log (its first container by default), written
        ``at`` a time of the test's choosing (now by default)."""
        pod = self.store.get("pods", namespace, name)
        container = container or pod["spec"]["containers"][0]["name"]
        self.store.append_log(pod["metadata"]["uid"], container, text, at)

    def reset(self) -> None:
        with self._wake:
            self._rules.clear()
            self._seen.clear()
            self._triggers.clear()
            self._due.clear()
            self._blocked.clear()
            self.node_labels = _node_labels(self.node)
            self._rescan = True

    # -- life ------------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        self.store.subscribe(self._poke)
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.store.unsubscribe(self._poke)
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(10)

    def _poke(self) -> None:
        with self._wake:
            self._woken = True
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._stopping:
                    return
                self._woken = False
            started = time.perf_counter()
            next_due = self._step()
            self.busy_seconds += time.perf_counter() - started
            with self._wake:
                if self._stopping:
                    return
                if not self._woken:
                    timeout = None if next_due is None else max(0.0, next_due - time.monotonic())
                    self._wake.wait(timeout)

    # -- the steps -------------------------------------------------------------------------

    def _rule(self, pod: dict[str, Any]) -> Rule:
        with self._wake:
            for rule in reversed(self._rules):
                if rule.matches(pod):
                    return rule
        return Rule()

    def _work(self) -> set[PodKey] | None:
        """The Pods to look at now: the ones changed since the last step, due, triggered
        or waiting for a Secret or claim that changed; None for every Pod (at the start,
        after a new rule, or when the store's history no longer reaches back)."""
        with self._wake:
            rescan, self._rescan = self._rescan, False
            keys, self._pending = self._pending, set()
            moment = time.monotonic()
            for key, at in list(self._due.items()):
                if at <= moment:
                    keys.add(key)
                    del self._due[key]
        if not rescan:
            try:
                changes = self.store.changes_since(self._cursor)
            except ApiError:
                rescan = True
                changes = []
            for change in changes:
                self._cursor = change.rv
                if change.resource == "pods":
                    keys.add((change.namespace, change.new["metadata"]["name"]))
                    if change.type == "DELETED":
                        with self._wake:
                            self._seen.pop(change.new["metadata"]["uid"], None)
                elif change.resource in ("secrets", "persistentvolumeclaims"):
                    keys |= self._blocked
        if rescan:
            self._cursor = self.store.resource_version
            return None
        return keys

    def _step(self) -> float | None:
        """Move each Pod that needs it one step; return the next deadline (monotonic)."""
        keys = self._work()
        if keys is None:
            pods = list(self.store.pods())
            live = {p["metadata"]["uid"] for p in pods}
            with self._wake:
                for uid in set(self._seen) - live:
                    del self._seen[uid]
        else:
            pods = []
            for ns, name in keys:
                with contextlib.suppress(ApiError):  # gone meanwhile
                    pods.append(self.store.get("pods", ns, name))
        for pod in pods:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            with self._wake:
                seen = self._seen.setdefault(pod["metadata"]["uid"], _Seen())
            try:
                due = self._advance(pod, self._rule(pod), seen)
            except ApiError as error:
                self.errors.append(f"{key[1]}: {error.message}")
                due = time.monotonic() + 0.05  # refused (changed under us): look again
            if due is not None:
                with self._wake:
                    self._due[key] = due
        with self._wake:
            return min(self._due.values(), default=None)

    def _advance(self, pod: dict[str, Any], rule: Rule, seen: _Seen) -> float | None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        ns, name = meta["namespace"], meta["name"]
        phase = status.get("phase")
        if seen.lost:
            return None
        if meta.get("deletionTimestamp"):
            for container in spec["containers"]:
                self._event(pod, "Normal", "Killing", f"Stopping container {container['name']}")
            self._remove(ns, name)
            return None
        if phase in ("Succeeded", "Failed"):
            return None
        if not spec.get("nodeName"):
            missing = self._missing_claim(pod)
            self._block((ns, name), missing is not None)
            message = rule.unschedulable or missing or self._unmatched(pod)
            if message is None:
                self._bind_claims(pod)
                self._bind(pod)
            elif _scheduled_message(status) != message:
                self._unschedulable(ns, name, message)
                self._event(pod, "Warning", "FailedScheduling", message)
            return None
        states = [s.get("state") or {} for s in status.get("containerStatuses") or []]
        if not states:
            self._creating(ns, name)
            return None
        if all("waiting" in s for s in states):
            return self._start(pod, rule, states)
        if phase == "Running" and rule.has_outcome:
            if seen.due is None:
                seen.due = time.monotonic() + rule.after_ms / 1000
            with self._wake:
                triggered = (ns, name) in self._triggers
                self._triggers.discard((ns, name))
            if rule.on_trigger and not triggered:
                return None
            if not rule.on_trigger and time.monotonic() < seen.due:
                return seen.due
            if rule.node_lost:
                seen.lost = True
                self._lose(ns, name)
            else:
                self._finish(ns, name, 137 if rule.oom else rule.exit_code or 0, rule.oom)
        return None

    def _unschedulable(self, ns: str, name: str, message: str) -> None:
        def write(pod: dict[str, Any]) -> None:
            pod["status"]["conditions"] = [
                _condition("PodScheduled", "False", "Unschedulable", message)
            ]

        self._update(ns, name, write)

    def _bind(self, pod: dict[str, Any]) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

        def write(pod: dict[str, Any]) -> None:
            pod["spec"]["nodeName"] = self.node
            pod["status"]["conditions"] = [_condition("PodScheduled", "True")]

        self._update(ns, name, write)
        message = f"Successfully assigned {ns}/{name} to {self.node}"
        self._event(pod, "Normal", "Scheduled", message, source="default-scheduler")

    def _creating(self, ns: str, name: str) -> None:
        def write(pod: dict[str, Any]) -> None:
            status = pod["status"]
            status.update(hostIP=NODE_IP, hostIPs=[{"ip": NODE_IP}], startTime=now())
            status["conditions"] = [
                _condition("PodReadyToStartContainers", "True"),
                _condition("Initialized", "True"),
                _condition("Ready", "False", "ContainersNotReady",
                           "containers with unready status: " + _names(pod)),
                _condition("ContainersReady", "False", "ContainersNotReady",
                           "containers with unready status: " + _names(pod)),
                _condition("PodScheduled", "True"),
            ]  # fmt: skip
            status["containerStatuses"] = [
                _container(c, {"waiting": {"reason": "ContainerCreating"}})
                for c in pod["spec"]["containers"]
            ]

        self._update(ns, name, write)

    def _start(self, pod: dict[str, Any], rule: Rule, states: list[dict]) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        images = [c["image"] for c in pod["spec"]["containers"]]
        invalid = next((i for i in images if not _VALID_IMAGE.match(i)), None)
        reason = "InvalidImageName" if invalid else rule.image_error
        current = states[0]["waiting"].get("reason")
        if reason is not None:
            if reason == "ImagePullBackOff" and current == "ContainerCreating":
                reason = "ErrImagePull"  # the kubelet reports the pull error first
            if current != reason:
                self._waiting(ns, name, reason)
                self._event(pod, "Warning", "Failed", _MESSAGES[reason].format(image=images[0]))
            return
        missing = self._missing_secret(pod)
        self._block((ns, name), missing is not None)
        if missing is not None:
            if states[0]["waiting"].get("message") != missing:
                self._waiting(ns, name, "CreateContainerConfigError", missing)
                self._event(pod, "Warning", "Failed", f"Error: {missing}")
            return
        uid = pod["metadata"]["uid"]
        if rule.usage:
            self.store.set_usage(
                uid, {c["name"]: dict(rule.usage) for c in pod["spec"]["containers"]}
            )
        self._ips += 1
        ip = f"10.244.0.{self._ips % 250 + 2}"

        def write(pod: dict[str, Any]) -> None:
            status = pod["status"]
            status.update(phase="Running", podIP=ip, podIPs=[{"ip": ip}])
            _set_condition(status, "Ready", "True")
            _set_condition(status, "ContainersReady", "True")
            started = now()
            status["containerStatuses"] = [
                {**_container(c, {"running": {"startedAt": started}}), "ready": True,
                 "started": True, "containerID": "containerd://" + secrets.token_hex(32)}
                for c in pod["spec"]["containers"]
            ]  # fmt: skip

        self._update(ns, name, write)
        for container in pod["spec"]["containers"]:
            self._event(pod, "Normal", "Started", f"Started container {container['name']}")
        for line in rule.logs:
            self.store.append_log(uid, pod["spec"]["containers"][0]["name"], line)

    def _waiting(self, ns: str, name: str, reason: str, message: str | None = None) -> None:
        def write(pod: dict[str, Any]) -> None:
            for status, container in zip(
                pod["status"]["containerStatuses"], pod["spec"]["containers"], strict=True
            ):
                text = message or _MESSAGES[reason].format(image=container["image"])
                status["state"] = {"waiting": {"reason": reason, "message": text}}

        self._update(ns, name, write)

    # -- what the Pod refers to ----------------------------------------------------------

    def _block(self, key: PodKey, blocked: bool) -> None:
        with self._wake:
            if blocked:
                self._blocked.add(key)
            else:
                self._blocked.discard(key)

    def _unmatched(self, pod: dict[str, Any]) -> str | None:
        """The scheduler's message for a ``nodeSelector`` the node's labels do not meet."""
        with self._wake:
            labels = dict(self.node_labels)
        wanted = pod["spec"].get("nodeSelector") or {}
        if all(labels.get(k) == v for k, v in wanted.items()):
            return None
        return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."

    def _missing_claim(self, pod: dict[str, Any]) -> str | None:
        """The scheduler's message for a claim that does not exist, if one does not."""
        ns = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                try:
                    self.store.get("persistentvolumeclaims", ns, claim)
                except ApiError:
                    return f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found.'
        return None

    def _bind_claims(self, pod: dict[str, Any]) -> None:
        """Bind the Pod's Pending claims (a WaitForFirstConsumer class binds on the first
        Pod scheduled)."""
        ns = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue

            def bind(pvc: dict[str, Any]) -> None:
                if pvc.get("status", {}).get("phase") == "Bound":
                    return
                pvc["spec"]["volumeName"] = "pvc-" + pvc["metadata"]["uid"]
                pvc["status"] = {
                    "phase": "Bound",
                    "accessModes": pvc["spec"]["accessModes"],
                    "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"]},
                }

            with contextlib.suppress(ApiError):  # deleted meanwhile
                self.store.update("persistentvolumeclaims", ns, claim, bind)

    def _missing_secret(self, pod: dict[str, Any]) -> str | None:
        """The kubelet's message for a Secret (or key) an env var needs and lacks."""
        ns = pod["metadata"]["namespace"]
        for container in pod["spec"]["containers"]:
            refs = [
                (e["valueFrom"]["secretKeyRef"], True)
                for e in container.get("env") or []
                if (e.get("valueFrom") or {}).get("secretKeyRef")
            ] + [
                (e["secretRef"], False)
                for e in container.get("envFrom") or []
                if e.get("secretRef")
            ]
            for ref, keyed in refs:
                if ref.get("optional"):
                    continue
                try:
                    secret = self.store.get("secrets", ns, ref["name"])
                except ApiError:
                    return f'secret "{ref["name"]}" not found'
                if keyed and ref["key"] not in (secret.get("data") or {}):
                    return f"couldn't find key {ref['key']} in Secret {ns}/{ref['name']}"
        return None

    def _event(
        self,
        pod: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        source: str = "kubelet",
    ) -> None:
        """An Event about the Pod, as the scheduler and the kubelet write them."""
        meta = pod["metadata"]
        stamp = now()
        body = {
            "metadata": {"generateName": meta["name"] + "."},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": meta["namespace"],
                               "name": meta["name"], "uid": meta.get("uid", "")},
            "type": type_, "reason": reason, "message": message, "count": 1,
            "firstTimestamp": stamp, "lastTimestamp": stamp,
            "source": {"component": source, "host": self.node},
            "reportingComponent": source, "reportingInstance": self.node,
        }  # fmt: skip
        with contextlib.suppress(ApiError):  # the namespace is going
            self.store.create("events", meta["namespace"], body)

    def _finish(self, ns: str, name: str, code: int, oom: bool) -> None:
        reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")

        def write(pod: dict[str, Any]) -> None:
            status = pod["status"]
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            _set_condition(status, "Ready", "False", "PodCompleted")
            _set_condition(status, "ContainersReady", "False", "PodCompleted")
            for container in status["containerStatuses"]:
                started = container["state"].get("running", {}).get("startedAt", now())
                container.update(ready=False, started=False)
                container["state"] = {"terminated": {
                    "exitCode": code, "reason": reason, "startedAt": started,
                    "finishedAt": now(), "containerID": container.get("containerID", ""),
                }}  # fmt: skip

        self._update(ns, name, write)

    def _lose(self, ns: str, name: str) -> None:
        def write(pod: dict[str, Any]) -> None:
            status = pod["status"]
            status.update(
                phase="Unknown",
                reason="NodeLost",
                message=f"Node {self.node} which was running pod {name} is unresponsive",
            )
            _set_condition(status, "Ready", "Unknown", "NodeStatusUnknown",
                           "Kubelet stopped posting node status.")  # fmt: skip

        self._update(ns, name, write)

    def _remove(self, ns: str, name: str) -> None:
        try:
            self.store.remove("pods", ns, name)
        except ApiError as error:
            if error.code != 404:
                raise

    def _update(self, ns: str, name: str, write) -> None:
        try:
            self.store.update("pods", ns, name, write)
        except ApiError as error:
            if error.code != 404:  # deleted meanwhile: nothing to do
                raise


def _node_labels(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64"}  # fmt: skip


def _scheduled_message(status: dict[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return condition.get("message")
    return None


def _names(pod: dict[str, Any]) -> str:
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


def _condition(type_: str, status: str, reason: str | None = None, message: str | None = None):
    condition = {"type": type_, "status": status, "lastProbeTime": None,
                 "lastTransitionTime": now()}  # fmt: skip
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _set_condition(status: dict[str, Any], type_: str, value: str, reason=None, message=None):
    conditions = status.setdefault("conditions", [])
    for i, condition in enumerate(conditions):
        if condition["type"] == type_:
            conditions[i] = _condition(type_, value, reason, message)
            return
    conditions.append(_condition(type_, value, reason, message))
