"""``KubernetesEngine``: the ``Engine`` contract on Pods of one namespace.

How each method maps (docs/kubernetes.md):

- ``create``: the instance's Secret (its secret env values, when it has any), named from
  ``spec.name``; ``start`` makes the Pod (``pods.pod_manifest``) from the stored spec (a
  Pod runs as soon as it exists). A name already held by our object for the same
  instance is adopted (a retried create or start); one held by anything else is a
  permanent error. The engine-side id is the Pod's name (a Pod made again keeps it).
- ``start``: nothing when the Pod is pending or running; a Pod that ended (it cannot
  restart: ``restartPolicy: Never``) or none at all is made again from the stored spec.
- ``stop``: delete the Pod with ``timeout`` as its grace period and wait until it is
  gone (``stop_removes``); the workspace claim stays. ``remove``: the Pod and its Secret.
- ``ensure_workspace``: the owner's PersistentVolumeClaim, made once and never deleted
  by a stop; ``remove_volume`` deletes it. ``ensure_network``: nothing (isolation is the
  NetworkPolicy of deploy/kubernetes). ``ensure_image``: nothing (the kubelet pulls per
  ``imagePullPolicy``); ``image_present``: None (unknown on a cluster).
- ``events``: ``watch.stream``; ``logs``/``follow_logs``: ``logs``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineError,
    EngineEvent,
    PermanentEngineError,
    Workspace,
)
from containers.engines.follows import EngineStream, follow_in_thread
from containers.engines.kubernetes import names, pods, watch
from containers.engines.kubernetes.config import KubeTarget, api_client
from containers.engines.kubernetes.errors import translated
from containers.engines.kubernetes.logs import LogStream
from containers.engines.kubernetes.states import state_of
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE

GONE_POLL_FIRST = 0.05  # how soon a deleted Pod is looked for again, doubling...
GONE_POLL_CAP = 1.0  # ...up to this
FOLLOW_READ_SECONDS = 86400  # a followed log's idle read; the follow's ``until`` ends it
GONE_SLACK = 30.0  # beyond the grace period, how long a stop waits for the Pod to go
METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
LIVE = frozenset({"created", "running", "unknown"})  # a start leaves such a Pod as it is

OURS = f"{LABEL_INSTALLATION},{LABEL_INSTANCE}"  # the selector of objects gobrave made


def _json(response: Any) -> dict[str, Any]:
    return json.loads(response.data or b"{}")


class KubernetesEngine:
    """``Engine`` for one namespace (``KubeTarget``). ``timeout`` bounds every call but
    the watch and a follow (bounded by their own ends)."""

    stop_removes = True  # a stop deletes the Pod; a start makes it again
    honours_node_constraints = True  # ``node.`` constraints become the nodeSelector
    reports_cpu = True  # the metrics API (``metrics.k8s.io`` PodMetrics) where served...
    cpu_discovered = True  # ...which a cluster may not: ``stats_served`` asks
    start_runs = False  # ``start`` makes the Pod; it runs when the kubelet starts it

    def __init__(
        self, target: KubeTarget, *, timeout: float = 30.0, watch_seconds: int = 300
    ) -> None:
        self.target = target
        self.timeout = timeout
        self.watch_seconds = watch_seconds  # a watch stream ends after this; reopened
        self.namespace = target.namespace
        self._api: client.ApiClient | None = None
        self._core_api: client.CoreV1Api | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._pods = watch.PodWatch()

    # --- the client ----------------------------------------------------------------------

    def _core(self) -> client.CoreV1Api:
        """The client of this process, made on first use (and again after a fork); a
        call in a process that has one takes no lock (``CoreV1Api`` holds nothing but
        its ``ApiClient``, whose pool is thread-safe)."""
        core, pid = self._core_api, self._pid
        if core is not None and pid == os.getpid():
            return core
        with self._lock:
            if self._core_api is None or self._pid != os.getpid():
                self._api = api_client(self.target, timeout=self.timeout)
                self._core_api = client.CoreV1Api(self._api)
                self._pid = os.getpid()
            return self._core_api

    def _call(
        self,
        what: str,
        method: str,
        *args: Any,
        missing_ok: bool = False,
        within: float | None = None,
        **kwargs: Any,
    ):
        """One API call as JSON (None: 404 and ``missing_ok``); errors translated.
        ``within``: seconds the answer may take (None: ``timeout``)."""
        with translated(what, self.target.where):
            core = self._core()
            try:
                response = getattr(core, method)(
                    *args,
                    _preload_content=False,
                    _request_timeout=within if within is not None else self.timeout,
                    **kwargs,
                )
            except ApiException as exc:
                if exc.status == 404 and missing_ok:
                    return None
                raise
            return _json(response)

    # --- health ----------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            self.check()
        except EngineError:
            return False
        return True

    def check(self, *, timeout: float | None = None) -> None:
        """List one Pod of the namespace: the API answers and gobrave may read there,
        within ``timeout`` seconds if given (the heartbeat's bound), else ``self.timeout``."""
        self._call("list pods", "list_namespaced_pod", self.namespace, limit=1, within=timeout)

    def node_name(self) -> str:
        return ""  # no one host: each Pod's node is its ``spec.nodeName`` (``inspect``)

    # --- images, workspaces, networks -----------------------------------------------------

    def image_present(self, image: str) -> bool | None:
        return None  # whichever node runs the Pod pulls it: unknown here

    def ensure_image(self, image: str, pull_policy: str) -> None:
        """Nothing: the kubelet pulls per ``imagePullPolicy`` (``never``: ``Never``; a
        missing image then fails the instance with the kubelet's reason)."""

    def ensure_network(self, name: str, *, labels: dict[str, str]) -> None:
        """Nothing: Pods share the cluster network; isolation is a NetworkPolicy."""

    def ensure_workspace(self, workspace: Workspace, *, image: str) -> None:
        """The owner's claim (``names.claim_name``), made once; ownership comes from the
        Pod's ``fsGroup``, so ``image`` is not needed. A claim with that name that is not
        ours (another installation's, or none's) is a permanent error."""
        name = names.claim_name(workspace.source)
        body = pods.claim_manifest(
            name,
            labels=workspace.labels,
            size=self.target.volume_size,
            access_mode=self.target.access_mode,
            storage_class=self.target.storage_class,
        )
        self._create_or_adopt(
            f"create claim {name}",
            "persistent_volume_claim",
            body,
            owner_key=LABEL_INSTALLATION,
            owner=workspace.labels.get(LABEL_INSTALLATION, ""),
        )

    def _create_or_adopt(
        self, what: str, kind: str, body: dict[str, Any], *, owner_key: str, owner: str
    ) -> dict[str, Any] | None:
        """Create ``body``: the object as the API made it; if its name is taken, the
        holder is adopted (None) when its ``owner_key`` label is ``owner``, else a
        permanent error."""
        name = body["metadata"]["name"]
        try:
            return self._call(what, f"create_namespaced_{kind}", self.namespace, body)
        except EngineError as exc:
            if "(HTTP 409)" not in str(exc):
                raise
        held = self._call(what, f"read_namespaced_{kind}", name, self.namespace, missing_ok=True)
        if held is None:
            raise EngineError(f"{what}: name conflict, but the holder vanished")
        theirs = names.labels_of(held.get("metadata") or {}).get(owner_key)
        if theirs != owner:
            raise PermanentEngineError(
                f"{what}: the name is held by another object ({owner_key}={theirs!r},"
                f" not {owner!r})"
            )
        return None

    def remove_volume(self, name: str) -> None:
        """Delete the owner's claim if it is gobrave's (it carries the installation label
        that ``ensure_workspace`` gave it); a claim of anyone else's with that name stays,
        as ``ensure_workspace`` refuses it."""
        self._delete_ours(
            "persistent_volume_claim", names.claim_name(name), selector=LABEL_INSTALLATION
        )

    def volume_sizes(self, names_: list[str]) -> dict[str, int]:
        return {}  # the API does not say what a claim holds

    # --- containers ------------------------------------------------------------------------

    def create(self, spec: ContainerSpec) -> str:
        """Check the spec, refuse a name held by a Pod that is not this instance's, and
        make the instance's Secret (its secret env values, when it has any). The Pod
        itself is made by ``start``: on a cluster a Pod runs as soon as it exists, so
        ``create`` then ``start`` make exactly one run, as on Docker. Idempotent (a
        retried create adopts its Secret); returns the Pod's name."""
        pods.pod_manifest(spec, access_mode=self.target.access_mode)  # refusals raise here
        instance = spec.labels.get(LABEL_INSTANCE, "")
        held = self._read(spec.name)
        if held is not None:
            theirs = names.labels_of(held.get("metadata") or {}).get(LABEL_INSTANCE)
            if theirs != instance:
                raise PermanentEngineError(
                    f"create {spec.name}: the name is held by another Pod"
                    f" ({LABEL_INSTANCE}={theirs!r}, not {instance!r})"
                )
        self._secret_ensure(spec)
        return spec.name

    def _secret_ensure(self, spec: ContainerSpec) -> None:
        """The instance's Secret (its secret env values), when it has any: made, or
        adopted and given the stored spec's values. Idempotent."""
        secret = pods.secret_manifest(spec)
        if secret is None:
            return
        name = secret["metadata"]["name"]
        made = self._create_or_adopt(
            f"create secret {name}",
            "secret",
            secret,
            owner_key=LABEL_INSTANCE,
            owner=spec.labels.get(LABEL_INSTANCE, ""),
        )
        if made is None:  # adopted: its values become the stored spec's
            self._call(
                f"update secret {name}",
                "patch_namespaced_secret",
                name,
                self.namespace,
                {"stringData": secret["stringData"]},
            )

    def _pod_create(self, spec: ContainerSpec) -> dict[str, Any] | None:
        """Make the Pod of ``spec`` (its Secret first): the Pod as the API made it; None
        when a Pod of this instance holds the name already; anything else holding it is
        a permanent error."""
        self._secret_ensure(spec)
        body = pods.pod_manifest(spec, access_mode=self.target.access_mode)
        return self._create_or_adopt(
            f"create {spec.name}",
            "pod",
            body,
            owner_key=LABEL_INSTANCE,
            owner=spec.labels.get(LABEL_INSTANCE, ""),
        )

    def _read(self, ref: str) -> dict[str, Any] | None:
        return self._call(
            f"inspect {ref}", "read_namespaced_pod", ref, self.namespace, missing_ok=True
        )

    def inspect(self, ref: str) -> ContainerState | None:
        pod = self._read(ref)
        return state_of(pod) if pod is not None else None

    def stats_served(self, *, timeout: float | None = None) -> bool:
        """Whether the cluster serves PodMetrics: API discovery of ``metrics.k8s.io/v1beta1``
        (one GET, which every authenticated user may make: the ``system:discovery``
        binding, so no Role grants it). 404: no metrics API (no metrics-server); any other
        refusal (a 503 from an APIService whose metrics-server is down) is an
        ``EngineError``: the answer is unknown, not "no"."""
        with translated("discover metrics.k8s.io/v1beta1", self.target.where):
            self._core()
            custom = client.CustomObjectsApi(self._api)
            try:
                response = custom.get_api_resources(
                    METRICS_GROUP,
                    METRICS_VERSION,
                    _preload_content=False,
                    _request_timeout=timeout if timeout is not None else self.timeout,
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
        served = _json(response).get("resources") or []
        return any(each.get("name") == "pods" for each in served)

    def stats(self, ref: str) -> ContainerStats | None:
        """The Pod's ``metrics.k8s.io/v1beta1`` PodMetrics (metrics-server's average over
        its window: a rate, ``ContainerStats.is_rate``), its containers' CPU summed, one
        GET. None when the Pod is missing, not running or not scraped yet (404), and when
        the cluster serves no metrics API (also a 404; a template's ``idle_timeout`` is
        refused on a runtime whose cluster was found without one: ``stats_served``)."""
        with translated(f"stats {ref}", self.target.where):
            self._core()
            custom = client.CustomObjectsApi(self._api)
            try:
                response = custom.get_namespaced_custom_object(
                    METRICS_GROUP,
                    METRICS_VERSION,
                    self.namespace,
                    "pods",
                    ref,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
        found = _json(response)
        cpu = memory = 0.0
        for each in found.get("containers") or []:
            usage = each.get("usage") or {}
            cpu += float(parse_quantity(usage.get("cpu", "0")))
            memory += float(parse_quantity(usage.get("memory", "0")))
        return ContainerStats(read_at=time.time(), cpu_cores=cpu, memory_bytes=int(memory))

    def start(self, ref: str, spec: ContainerSpec | None = None) -> ContainerState:
        """Make the Pod from ``spec`` (the stored spec). Nothing when it is pending or
        running; one that ended (a Pod never restarts: ``restartPolicy: Never``) or is
        being deleted is deleted and made again, as Docker restarts an exited container.

        The Pod is made first and looked at only when its name is taken (the common
        start, of a Pod that is not there, is one call): a Pod of this instance is then
        read, and left if live, else deleted and made again; anything else holding the
        name is a permanent error (``_create_or_adopt``). Returns the Pod's state as the
        API answered: the Pod it made (nearly always ``Pending``), or the live one read.
        """
        if spec is None:
            state = self.inspect(ref)
            if state is not None and state.status in LIVE:
                return state
            raise PermanentEngineError(f"start {ref}: no Pod, and no stored spec to make it")
        made = self._pod_create(spec)
        if made is not None:
            return state_of(made)
        state = self.inspect(ref)
        if state is None:  # deleted since its name was found taken: a retry makes it
            raise EngineError(f"start {ref}: the Pod went away while being started")
        if state.status in LIVE:
            return state
        self._delete_pod(ref, grace=0)
        self._wait_gone(ref, grace=0)
        made = self._pod_create(spec)
        if made is None:
            raise EngineError(f"start {ref}: a Pod of the same name was made meanwhile")
        return state_of(made)

    def _delete_ours(self, kind: str, name: str, *, selector: str = OURS, **options: Any) -> bool:
        """Delete object ``name`` of ``kind`` if it carries gobrave's labels (``selector``:
        an instance's objects carry the installation and instance labels, a workspace
        claim the installation's), in one request: a delete of the collection that its
        name and those labels select, so that an object without them (a foreign one
        holding the name: a create refused it) is never deleted, and nothing is read
        first. True when one of ours was there (and is now deleted, or being deleted)."""
        answer = self._call(
            f"delete {name}",
            f"delete_collection_namespaced_{kind}",
            self.namespace,
            missing_ok=True,
            label_selector=selector,
            field_selector=f"metadata.name={name}",
            **options,
        )
        return bool((answer or {}).get("items"))

    def _delete_pod(self, ref: str, *, grace: int) -> bool:
        return self._delete_ours(
            "pod", ref, grace_period_seconds=grace, propagation_policy="Background"
        )

    def _wait_gone(self, ref: str, *, grace: int) -> None:
        """Poll until no Pod of gobrave's is named ``ref`` (a deletion takes up to its
        grace period); ``EngineError`` past ``grace`` + ``GONE_SLACK`` (the request is
        retried)."""
        deadline = time.monotonic() + grace + GONE_SLACK
        pause = GONE_POLL_FIRST
        while (pod := self._read(ref)) is not None and names.ours(pod.get("metadata") or {}):
            if time.monotonic() >= deadline:
                raise EngineError(f"{ref}: the Pod is still being deleted")
            time.sleep(pause)  # polling the API with a deadline, not synchronisation
            pause = min(pause * 2, GONE_POLL_CAP)

    def stop(self, ref: str, timeout: int) -> None:
        """Delete the Pod with ``timeout`` s of grace and wait until it is gone; one that
        its node did not end in time (a lost node never does) is deleted at once, as a
        Docker stop ends in a kill. The Secret and the workspace claim stay (a start makes
        the Pod again). A Pod under the name that is not gobrave's is left alone."""
        if not self._delete_pod(ref, grace=timeout):
            return
        try:
            self._wait_gone(ref, grace=timeout)
        except EngineError:
            self._delete_pod(ref, grace=0)
            self._wait_gone(ref, grace=0)

    def remove(self, ref: str) -> None:
        """Delete the Pod at once and its Secret, each only if it is gobrave's (an object
        of another holding the name stays: ``_delete_ours``). Idempotent."""
        self._delete_pod(ref, grace=0)
        self._delete_ours("secret", names.secret_name(ref))

    def list_ours(
        self, installation: str, labels: dict[str, str] | None = None
    ) -> list[ContainerState]:
        listed = self._call(
            "list pods",
            "list_namespaced_pod",
            self.namespace,
            label_selector=names.selector(installation, labels),
        )
        return [state_of(pod) for pod in listed.get("items") or []]

    # --- output -----------------------------------------------------------------------------

    def _log_response(self, ref: str, *, tail: int, follow: bool) -> LogStream | None:
        """The log response of the Pod's container; None when there is no Pod, or its
        container has not started (the API answers 400: nothing printed yet)."""
        with translated(f"logs {ref}", self.target.where):
            core = self._core()
            try:
                response = core.read_namespaced_pod_log(
                    ref,
                    self.namespace,
                    container=names.CONTAINER,
                    tail_lines=tail,
                    follow=follow,
                    _preload_content=False,
                    # A follow's read may be idle for long: ``until`` bounds it (the adapter).
                    _request_timeout=(self.timeout, FOLLOW_READ_SECONDS)
                    if follow
                    else self.timeout,
                )
            except ApiException as exc:
                if exc.status in (400, 404):
                    return None
                raise
        return LogStream(response)

    def logs(self, ref: str, tail: int = 100) -> Iterator[bytes]:
        stream = self._log_response(ref, tail=tail, follow=False)
        return iter(stream) if stream is not None else iter(())

    async def follow_logs(self, ref: str, *, tail: int, until: float) -> EngineStream:
        return await follow_in_thread(
            lambda: self._log_response(ref, tail=tail, follow=True), until=until
        )

    # --- events -----------------------------------------------------------------------------

    def event_cursor_now(self) -> str:
        listed = self._call("list pods", "list_namespaced_pod", self.namespace, limit=1)
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def events(self, installation: str, since: str | None = None) -> Iterator[EngineEvent]:
        """See ``watch``. Opens now (an API that does not answer raises here)."""
        selector = names.selector(installation)
        cursor = since or self.event_cursor_now()
        if since:
            self.check()
        core = self._core()

        def list_json() -> dict[str, Any]:
            return self._call(
                "list pods", "list_namespaced_pod", self.namespace, label_selector=selector
            )

        return watch.stream(
            pods=self._pods,
            list_pods=core.list_namespaced_pod,
            list_json=list_json,
            namespace=self.namespace,
            selector=selector,
            since=cursor,
            timeout=self.timeout,
            seconds=self.watch_seconds,
        )


__all__ = ["KubernetesEngine"]
