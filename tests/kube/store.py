"""The emulator's state: objects by (resource, namespace, name), one global
``resourceVersion`` counter, a bounded history of changes for watches, the Pods' logs and
metrics. Thread-safe (one lock): the HTTP server, the fake kubelet and the test all use it.

Every write takes the next ``resourceVersion`` (a global integer, written as a string on
the object, as etcd's revision is) and appends a ``Change`` to the history; the history
keeps the last ``history_limit`` changes, and a watch that asks for a version older than
the oldest kept answers 410 Gone. Listeners (a watch, a log follower, the kubelet) are
called after each change, outside the lock, and must only wake someone up."""

from __future__ import annotations

import base64
import copy
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.kube import podsecurity, quota, status, validation

# resource (the URL's plural) -> kind; namespaces are the only cluster-scoped resource.
KINDS = {
    "pods": "Pod",
    "secrets": "Secret",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "events": "Event",
    "resourcequotas": "ResourceQuota",
    "serviceaccounts": "ServiceAccount",
    "namespaces": "Namespace",
}
CLUSTER_SCOPED = {"namespaces"}
DEFAULT_HISTORY = 10_000
DEFAULT_GRACE_SECONDS = 30

Key = tuple[str, str, str]  # resource, namespace ("" when cluster-scoped), name


def now() -> str:
    """RFC 3339 in UTC to the second, as ``metadata.creationTimestamp`` is written."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    """One write: ``old`` is None for ADDED; ``new`` is the last state for DELETED."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: str
    namespace: str
    old: dict[str, Any] | None
    new: dict[str, Any]


@dataclass
class LogLine:
    time: datetime
    text: str


class Store:
    """The emulated cluster's objects. Every method takes the lock; objects handed out are
    copies, so a caller never changes the store by changing what it got."""

    def __init__(self, history_limit: int = DEFAULT_HISTORY) -> None:
        self._lock = threading.RLock()
        self._objects: dict[Key, dict[str, Any]] = {}
        self._rv = 0
        self._history: deque[Change] = deque()
        self._history_limit = history_limit
        self._compacted = 0  # changes at or below this version are gone from the history
        self._listeners: list[Callable[[], None]] = []
        self._logs: dict[tuple[str, str], list[LogLine]] = {}  # (pod uid, container)
        self._usage: dict[str, dict[str, dict[str, str]]] = {}  # pod uid -> container -> usage

    # -- listeners -------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def wake_all(self) -> None:
        """Wake every listener (a server closing its streams)."""
        self._notify()

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    # -- versions and history --------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def set_history_limit(self, limit: int) -> None:
        """Keep only the last ``limit`` changes (older ones are compacted at once)."""
        with self._lock:
            self._history_limit = limit
            self._trim()

    def _trim(self) -> None:
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv

    def _record(self, type_: str, key: Key, old: dict | None, new: dict) -> None:
        self._history.append(Change(self._rv, type_, key[0], key[1], old, copy.deepcopy(new)))
        self._trim()

    def _stamp(self, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def changes_since(self, rv: int) -> list[Change]:
        """The changes after ``rv``, oldest first; 410 Gone when some were compacted away."""
        with self._lock:
            if rv < self._compacted:
                raise status.expired(rv, self._compacted + 1)
            newer = []
            for change in reversed(self._history):  # the newest first: stop at the cursor
                if change.rv <= rv:
                    break
                newer.append(change)
            return newer[::-1]

    # -- reads -----------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                raise status.not_found(resource, name)
            return copy.deepcopy(obj)

    def list(self, resource: str, namespace: str | None) -> tuple[list[dict[str, Any]], int]:
        """Every object of ``resource`` (in ``namespace``, or everywhere when None), sorted
        by namespace and name, and the version this list is consistent with."""
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (res, ns, _), obj in sorted(self._objects.items())
                if res == resource and (namespace is None or ns == namespace)
            ]
            return items, self._rv

    # -- writes ----------------------------------------------------------------------------

    def create(
        self, resource: str, namespace: str, body: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Validate, admit (quota, Pod Security) and store a new object: 404 for a missing
        namespace, 409 for a taken name, 422 for an invalid object, 403 past a quota or the
        namespace's Pod Security level. ``dry_run``: every check, and nothing stored."""
        kind = KINDS[resource]
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = kind, "v1"
        meta = obj.setdefault("metadata", {}) or {}
        obj["metadata"] = meta
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        validation.validate(kind, resource, obj)
        with self._lock:
            if resource not in CLUSTER_SCOPED:
                if ("namespaces", "", namespace) not in self._objects:
                    raise status.not_found("namespaces", namespace)
                meta["namespace"] = namespace
            key = (resource, namespace, meta["name"])
            if key in self._objects:
                raise status.already_exists(resource, meta["name"])
            if resource == "pods":
                labels = self._objects[("namespaces", "", namespace)]["metadata"].get("labels")
                podsecurity.admit((labels or {}).get(podsecurity.LABEL), obj)
            quotas, _ = self.list("resourcequotas", namespace)
            if quotas and resource != "resourcequotas":
                quota.admit(resource, obj, quotas, self.list(resource, namespace)[0])
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now())
            meta.pop("resourceVersion", None)
            self._defaults(resource, obj)
            if dry_run:
                return copy.deepcopy(obj)
            self._stamp(obj)
            self._objects[key] = obj
            self._record("ADDED", key, None, obj)
            created = copy.deepcopy(obj)
            if resource == "namespaces":  # the service account controller's part
                self.create("serviceaccounts", meta["name"], {"metadata": {"name": "default"}})
        self._notify()
        return created

    @staticmethod
    def _defaults(resource: str, obj: dict[str, Any]) -> None:
        """What the API server fills in on create."""
        if resource == "pods":
            spec = obj["spec"]
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
            spec.setdefault("schedulerName", "default-scheduler")
            for container in spec["containers"]:
                container.setdefault("imagePullPolicy", "IfNotPresent")
                container.setdefault("terminationMessagePolicy", "File")
            obj["status"] = {"phase": "Pending", "qosClass": _qos(spec)}
        elif resource == "secrets":
            data = obj.get("data") or {}
            for key, value in (obj.pop("stringData", None) or {}).items():
                data[key] = base64.b64encode(value.encode()).decode()
            obj["data"] = data
            obj.setdefault("type", "Opaque")
        elif resource == "persistentvolumeclaims":
            obj["status"] = {"phase": "Pending"}
        elif resource == "namespaces":
            obj["status"] = {"phase": "Active"}

    def update(
        self,
        resource: str,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        expect_rv: str | None = None,
    ) -> dict[str, Any]:
        """Replace an object with ``change(copy)`` (or the copy it changed in place): 404
        when absent, 409 Conflict when ``expect_rv`` is not its version, 422 when the result
        is invalid. A change that leaves the object as it was writes nothing."""
        with self._lock:
            key = (resource, namespace, name)
            old = self._objects.get(key)
            if old is None:
                raise status.not_found(resource, name)
            if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
                raise status.conflict(resource, name)
            new = copy.deepcopy(old)
            new = change(new) or new
            # Identity is the server's: a change never moves or renames the object.
            for field in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion",
                          "deletionTimestamp", "deletionGracePeriodSeconds"):  # fmt: skip
                if field in old["metadata"]:
                    new.setdefault("metadata", {})[field] = old["metadata"][field]
            new["kind"], new["apiVersion"] = old["kind"], old["apiVersion"]
            if new == old:
                return copy.deepcopy(old)
            validation.validate(old["kind"], resource, new)
            self._stamp(new)
            self._objects[key] = new
            self._record("MODIFIED", key, old, new)
            updated = copy.deepcopy(new)
        self._notify()
        return updated

    def delete(
        self, resource: str, namespace: str, name: str, grace: int | None = None
    ) -> dict[str, Any]:
        """Delete an object; a Pod bound to a node with a grace period other than 0 is
        only marked (``deletionTimestamp``) and lingers until the kubelet removes it (a Pod
        on a lost node lingers until a delete with grace 0, as on a cluster)."""
        with self._lock:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                raise status.not_found(resource, name)
            if resource == "pods" and obj["spec"].get("nodeName"):
                if grace is None:
                    grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
                if grace > 0:
                    if obj["metadata"].get("deletionTimestamp"):
                        return copy.deepcopy(obj)

                    def mark(pod: dict[str, Any]) -> None:
                        pod["metadata"]["deletionTimestamp"] = now()
                        pod["metadata"]["deletionGracePeriodSeconds"] = grace

                    return self.update(resource, namespace, name, mark)
            return self.remove(resource, namespace, name)

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        """Remove an object at once (the kubelet finishing a Pod's deletion); DELETED
        carries the last state with a new version, as a watch sees it."""
        with self._lock:
            key = (resource, namespace, name)
            obj = self._objects.pop(key, None)
            if obj is None:
                raise status.not_found(resource, name)
            old = copy.deepcopy(obj)
            self._stamp(obj)
            self._record("DELETED", key, old, obj)
            if resource == "pods":
                uid = obj["metadata"]["uid"]
                self._usage.pop(uid, None)
                for log_key in [k for k in self._logs if k[0] == uid]:
                    del self._logs[log_key]
            if resource == "namespaces":
                for other in [k for k in self._objects if k[1] == name]:
                    del self._objects[other]
        self._notify()
        return copy.deepcopy(obj)

    def reset(self, keep_namespaces: set[str] | None = None) -> None:
        """Forget every object but the namespaces kept (all by default) and their service
        accounts, and every change so far: a watch from any earlier version answers 410.
        The version counter goes on."""
        with self._lock:
            if keep_namespaces is None:
                keep_namespaces = {k[2] for k in self._objects if k[0] == "namespaces"}
            self._objects = {
                key: obj
                for key, obj in self._objects.items()
                if (key[0] == "namespaces" and key[2] in keep_namespaces)
                or (key[0] == "serviceaccounts" and key[1] in keep_namespaces)
            }
            for obj in self._objects.values():
                obj["metadata"].pop("labels", None)  # the Pod Security level among them
            self._history.clear()
            self._rv += 1  # the forgetting is a change no watch can be given
            self._compacted = self._rv
            self._history_limit = DEFAULT_HISTORY
            self._logs.clear()
            self._usage.clear()
        self._notify()

    # -- logs and metrics (the kubelet writes, the log and metrics endpoints read) --------

    def append_log(self, uid: str, container: str, text: str, at: datetime | None = None) -> None:
        with self._lock:
            lines = self._logs.setdefault((uid, container), [])
            lines.extend(LogLine(at or datetime.now(UTC), line) for line in text.splitlines())
        self._notify()

    def log_lines(self, uid: str, container: str, start: int = 0) -> list[LogLine]:
        with self._lock:
            return list(self._logs.get((uid, container), [])[start:])

    def set_usage(self, uid: str, usage: dict[str, dict[str, str]]) -> None:
        with self._lock:
            self._usage[uid] = copy.deepcopy(usage)

    def usage(self, uid: str) -> dict[str, dict[str, str]] | None:
        with self._lock:
            return copy.deepcopy(self._usage.get(uid))

    def pods(self) -> Iterator[dict[str, Any]]:
        """A copy of every Pod (the kubelet's view)."""
        yield from self.list("pods", None)[0]


def _qos(spec: dict[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in spec["containers"]]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        r.get("limits", {}).get(k)
        and r.get("requests", {}).get(k, r["limits"][k]) == r["limits"][k]
        for r in resources
        for k in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"
