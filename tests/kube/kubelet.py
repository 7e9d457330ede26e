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
   and lacks gives ``CreateContainerConfigError`` until it exists; a ``pulling`` rule
   stops here, the image being pulled, until ``trigger()``);
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
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.kube import events, podstatus, prerequisites
from tests.kube.status import ApiError
from tests.kube.store import Store

NODE = "kube-node-1"
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
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
    pulling: bool = False  # ContainerCreating (a pull under way) until trigger(pod name)
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
        """Let the outcome of an ``on_trigger`` rule (or the pull of a ``pulling`` one)
        happen to Pod ``name`` now."""
        with self._wake:
            self._triggers.add((namespace, name))
            self._pending.add((namespace, name))
        self._poke()

    def finish(self, namespace: str, name: str, exit_code: int = 0, *, oom: bool = False) -> None:
        """Terminate a running Pod's containers now (``Succeeded``/``Failed``)."""
        code = 137 if oom else exit_code
        self._update(namespace, name, lambda p: podstatus.terminated(p, code, oom))

    def lose_node(self, namespace: str, name: str) -> None:
        """The node under Pod ``name`` stops reporting: phase ``Unknown`` from now on."""
        pod = self.store.get("pods", namespace, name)
        with self._wake:
            self._seen.setdefault(pod["metadata"]["uid"], _Seen()).lost = True
        self._update(namespace, name, lambda p: podstatus.node_lost(p, self.node))

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
            self._schedule(pod, rule)
            return None
        states = [s.get("state") or {} for s in status.get("containerStatuses") or []]
        if not states:
            self._update(ns, name, podstatus.creating)
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
                self._update(ns, name, lambda p: podstatus.node_lost(p, self.node))
            else:
                code = 137 if rule.oom else rule.exit_code or 0
                self._update(ns, name, lambda p: podstatus.terminated(p, code, rule.oom))
        return None

    def _schedule(self, pod: dict[str, Any], rule: Rule) -> None:
        """Bind the Pod to the node, or say why it cannot be (once per reason)."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        missing = prerequisites.missing_claim(self.store, pod)
        self._block((ns, name), missing is not None)
        with self._wake:
            labels = dict(self.node_labels)
        message = rule.unschedulable or missing or prerequisites.unmatched(labels, pod)
        if message is None:
            prerequisites.bind_claims(self.store, pod)
            self._update(ns, name, lambda p: podstatus.bound(p, self.node))
            assigned = f"Successfully assigned {ns}/{name} to {self.node}"
            self._event(pod, "Normal", "Scheduled", assigned, source="default-scheduler")
        elif podstatus.scheduled_message(pod.get("status") or {}) != message:
            self._update(ns, name, lambda p: podstatus.unschedulable(p, message))
            self._event(pod, "Warning", "FailedScheduling", message, source="default-scheduler")

    def _start(self, pod: dict[str, Any], rule: Rule, states: list[dict]) -> None:
        """Start the containers, or keep them waiting for their image or their Secrets."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        images = [c["image"] for c in pod["spec"]["containers"]]
        invalid = next((i for i in images if not _VALID_IMAGE.match(i)), None)
        reason = "InvalidImageName" if invalid else rule.image_error
        current = states[0]["waiting"].get("reason")
        if reason is not None:
            if reason == "ImagePullBackOff" and current == "ContainerCreating":
                reason = "ErrImagePull"  # the kubelet reports the pull error first
            if current != reason:
                self._update(ns, name, lambda p: podstatus.waiting(p, reason))
                message = podstatus.MESSAGES[reason].format(image=images[0])
                self._event(pod, "Warning", "Failed", message)
            return
        if rule.pulling:
            with self._wake:
                pulled = (ns, name) in self._triggers
                self._triggers.discard((ns, name))
            if not pulled:
                return
        missing = prerequisites.missing_secret(self.store, pod)
        self._block((ns, name), missing is not None)
        if missing is not None:
            if states[0]["waiting"].get("message") != missing:
                self._update(
                    ns, name, lambda p: podstatus.waiting(p, "CreateContainerConfigError", missing)
                )
                self._event(pod, "Warning", "Failed", f"Error: {missing}")
            return
        uid = pod["metadata"]["uid"]
        containers = [c["name"] for c in pod["spec"]["containers"]]
        if rule.usage:
            self.store.set_usage(uid, {c: dict(rule.usage) for c in containers})
        self._ips += 1
        ip = f"10.244.0.{self._ips % 250 + 2}"
        self._update(ns, name, lambda p: podstatus.running(p, ip))
        for container in containers:
            self._event(pod, "Normal", "Started", f"Started container {container}")
        for line in rule.logs:
            self.store.append_log(uid, containers[0], line)

    def _block(self, key: PodKey, blocked: bool) -> None:
        """Remember the Pods waiting for a Secret or a claim: a change to one wakes them."""
        with self._wake:
            if blocked:
                self._blocked.add(key)
            else:
                self._blocked.discard(key)

    def _event(self, pod, type_: str, reason: str, message: str, source: str = "kubelet"):
        events.record(self.store, pod, self.node, type_, reason, message, source)

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
