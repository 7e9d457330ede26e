"""The emulator's HTTP API (aiohttp): the paths and verbs of ``/api/v1`` for the resources
in ``store.KINDS``, ``pods/status``, ``pods/log`` (``logs.py``) and ``metrics.k8s.io``
PodMetrics (``metrics.py``).

A request is authenticated by its bearer token (401 otherwise), recorded as
``Call(verb, resource, subresource, namespace, group)`` (RBAC's words: get, list, watch,
create, update, patch, delete, deletecollection) and answered with the object, a list, a
watch stream or a ``Status``."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.kube import logs, metrics, patches, selectors, status, validation
from tests.kube.query import TRUE
from tests.kube.store import CLUSTER_SCOPED, KINDS, Change, Store

METRICS_GROUP = ("apis", "metrics.k8s.io", "v1beta1")
VERSION = {
    "major": "1", "minor": "34", "gitVersion": "v1.34.0-gobrave-emulator", "gitCommit": "",
    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "",
    "compiler": "", "platform": "linux/amd64",
}  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One API request as RBAC sees it (``namespace`` is "" for cluster-wide ones, ``group``
    "" for the core API)."""

    verb: str
    resource: str
    subresource: str
    namespace: str
    group: str = ""


@dataclass
class Target:
    group: str  # "" for the core API, "metrics.k8s.io"
    resource: str
    namespace: str | None
    name: str | None
    subresource: str


def _parse(path: str) -> Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif tuple(parts[:3]) == METRICS_GROUP:
        group, rest = "metrics.k8s.io", parts[3:]
    else:
        raise status.ApiError(404, f"the server could not find the requested resource ({path})")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise status.ApiError(404, f"the server could not find the requested resource ({path})")
    resource, name, sub = rest[0], (rest[1:2] or [None])[0], (rest[2:3] or [""])[0]
    known = {"pods"} if group else set(KINDS)
    if resource not in known:
        raise status.ApiError(404, f"the server could not find the requested resource ({path})")
    if resource == "namespaces" and namespace is not None:
        raise status.ApiError(404, f"the server could not find the requested resource ({path})")
    return Target(group, resource, namespace, name, sub)


def _verb(request: web.Request, target: Target) -> str:
    method = request.method
    if target.name is None:
        if method == "GET":
            return "watch" if request.query.get("watch") in TRUE else "list"
        return {"POST": "create", "DELETE": "deletecollection"}.get(method, method.lower())
    return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _json(data: Any, code: int = 200) -> web.Response:
    return web.json_response(data, status=code)


class Api:
    """The handlers, over one ``Store``; ``recorded()`` is every authenticated request."""

    def __init__(self, store: Store, token: str) -> None:
        self.store = store
        self.token = token
        self._calls: list[Call] = []
        self._calls_lock = threading.Lock()
        self.closing = False  # set (then the store woken) to end every open stream
        self.busy_seconds = 0.0  # time spent answering requests (streams left out)
        self.refusing: int | None = None  # an outage: every request answers this code
        self.dropped = 0  # bumped (then the store woken) to end the open watches
        # False: a cluster without metrics-server (no ``metrics.k8s.io``: 404 everywhere)
        self.serves_metrics = True

    def close_streams(self) -> None:
        self.closing = True
        self.store.wake_all()

    def drop_watches(self) -> None:
        self.dropped += 1
        self.store.wake_all()

    def recorded(self) -> list[Call]:
        with self._calls_lock:
            return list(self._calls)

    def forget_calls(self) -> None:
        with self._calls_lock:
            self._calls.clear()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/version", self.version)
        app.router.add_get("/version/", self.version)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def version(self, request: web.Request) -> web.Response:
        if self.refusing is not None:
            return _json(_unavailable(self.refusing).body(), self.refusing)
        return _json(VERSION)

    async def discovery(self, request: web.Request) -> web.StreamResponse:
        """``/api`` and ``/api/v1``: what the core group serves, for a client's health
        check or discovery."""
        if request.path.rstrip("/") == "/api":
            return _json({"kind": "APIVersions", "versions": ["v1"]})
        resources = []
        for plural, kind in KINDS.items():
            namespaced = plural not in CLUSTER_SCOPED
            verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update",
                     "watch"]  # fmt: skip
            resources.append({"name": plural, "kind": kind, "namespaced": namespaced,
                              "singularName": "", "verbs": verbs})  # fmt: skip
        resources += [
            {"name": "pods/log", "kind": "Pod", "namespaced": True, "singularName": "",
             "verbs": ["get"]},
            {"name": "pods/status", "kind": "Pod", "namespaced": True, "singularName": "",
             "verbs": ["get", "patch", "update"]},
        ]  # fmt: skip
        return _json({"kind": "APIResourceList", "groupVersion": "v1", "resources": resources})

    def metrics_discovery(self) -> web.Response:
        """``/apis/metrics.k8s.io/v1beta1``: the group's resources, where it is served."""
        if not self.serves_metrics:
            raise status.ApiError(404, "the server could not find the requested resource")
        verbs = ["get", "list"]
        resources = [{"name": name, "kind": kind, "namespaced": namespaced, "singularName": "",
                      "verbs": verbs} for name, kind, namespaced in
                     (("nodes", "NodeMetrics", False), ("pods", "PodMetrics", True))]  # fmt: skip
        return _json({"kind": "APIResourceList", "groupVersion": "metrics.k8s.io/v1beta1",
                      "resources": resources})  # fmt: skip

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            return await self._answer(request)
        finally:
            if request.query.get("watch") not in TRUE and request.query.get("follow") not in TRUE:
                with self._calls_lock:  # a stream's time is waiting, not work
                    self.busy_seconds += time.perf_counter() - started

    def _authenticated(self, request: web.Request) -> bool:
        """The request carries this server's bearer token. The scheme's case does not
        matter, as for the API server (``strings.ToLower(parts[0]) == "bearer"``): the
        client's in-cluster loader sends ``bearer <token>``."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token == self.token

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            if self.refusing is not None:
                raise _unavailable(self.refusing)
            if not self._authenticated(request):
                raise status.ApiError(401, "Unauthorized")
            if request.path.rstrip("/") in ("/api", "/api/v1"):
                # Not recorded: every authenticated user may read discovery (the cluster's
                # system:discovery binding), so no Role of the driver's needs to grant it.
                return await self.discovery(request)
            if request.path.rstrip("/") == "/" + "/".join(METRICS_GROUP):
                return self.metrics_discovery()  # not recorded either
            target = _parse(request.path)
            if target.group == "metrics.k8s.io" and not self.serves_metrics:
                raise status.ApiError(
                    404, f"the server could not find the requested resource ({request.path})"
                )
            verb = _verb(request, target)
            with self._calls_lock:
                self._calls.append(
                    Call(
                        verb,
                        target.resource,
                        target.subresource,
                        target.namespace or "",
                        target.group,
                    )  # fmt: skip
                )
            return await self._handle(request, target, verb)
        except status.ApiError as error:
            return _json(error.body(), error.code)
        except (AttributeError, KeyError, TypeError) as error:
            # A body of the wrong shape (a list for an object, a string for a map): the API
            # server cannot decode it either, and answers 400, never 500.
            return _json(
                status.ApiError(400, f"the object could not be decoded: {error!r}").body(), 400
            )

    async def _handle(self, request: web.Request, t: Target, verb: str) -> web.StreamResponse:
        namespace = "" if t.resource in CLUSTER_SCOPED else t.namespace
        if t.group == "metrics.k8s.io":
            return self._metrics(request, t, verb)
        if t.subresource == "log" and t.resource == "pods" and verb == "get":
            return await self._log(request, t.namespace or "", t.name or "")
        if t.subresource not in ("", "status") or (t.subresource and t.resource != "pods"):
            raise status.ApiError(404, f"{t.resource}/{t.subresource} is not served")
        if namespace is None and verb not in ("list", "watch"):
            raise status.ApiError(404, f"{t.resource} are namespaced")
        name = t.name or ""
        if verb == "list":
            return self._list(request, t.resource, namespace)
        if verb == "watch":
            return await self._watch(request, t.resource, namespace)
        if verb == "create":
            body = _object(await self._body(request), namespace, None)
            dry_run = request.query.get("dryRun") == "All"
            return _json(self.store.create(t.resource, namespace, body, dry_run=dry_run), 201)
        if verb == "get":
            return _json(self.store.get(t.resource, namespace, name))
        if verb == "update":
            return _json(await self._replace(request, t, namespace))
        if verb == "patch":
            return _json(await self._patch(request, t, namespace))
        if verb == "delete":
            return _json(self.store.delete(t.resource, namespace, name, await self._grace(request)))
        if verb == "deletecollection":
            return await self._delete_collection(request, t.resource, namespace)
        raise status.ApiError(405, f"{request.method} is not allowed here")

    # -- bodies and parameters -----------------------------------------------------------

    @staticmethod
    async def _body(request: web.Request) -> Any:
        try:
            return json.loads(await request.read() or b"null")
        except ValueError as error:
            raise status.ApiError(400, f"the body is not JSON: {error}") from error

    async def _grace(self, request: web.Request) -> int | None:
        raw = request.query.get("gracePeriodSeconds")
        if raw is None and request.can_read_body:
            options = await self._body(request)
            if isinstance(options, dict):
                raw = options.get("gracePeriodSeconds")
        try:
            return None if raw is None else int(raw)
        except ValueError as error:
            raise status.ApiError(400, f"gracePeriodSeconds: {raw!r} is not a number") from error

    @staticmethod
    def _selected(request: web.Request, resource: str):
        labels = selectors.label_selector(request.query.get("labelSelector"))
        fields = selectors.field_selector(resource, request.query.get("fieldSelector"))
        return lambda obj: selectors.matches(obj, labels, fields)

    # -- verbs -----------------------------------------------------------------------------

    def _list(self, request: web.Request, resource: str, namespace: str | None) -> web.Response:
        """A list, in chunks as the API server answers them: with ``limit``, at most that
        many items and, when more follow, ``metadata.continue`` (the token the next
        request passes to go on after the last item) and ``remainingItemCount``."""
        selected = self._selected(request, resource)
        limit, after = _chunk(request)
        items, rv = self.store.list(resource, namespace)
        chosen = [obj for obj in items if selected(obj) and _key(obj) > after]
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and len(chosen) > limit:
            chosen, rest = chosen[:limit], len(chosen) - limit
            token = json.dumps({"after": list(_key(chosen[-1]))}).encode()
            metadata["continue"] = base64.urlsafe_b64encode(token).decode()
            metadata["remainingItemCount"] = rest
        return _json(
            {
                "kind": KINDS[resource] + "List",
                "apiVersion": "v1",
                "metadata": metadata,
                "items": chosen,
            }
        )

    async def _delete_collection(
        self, request: web.Request, resource: str, namespace: str
    ) -> web.Response:
        """Delete every object the selectors choose, each as a delete of it with the
        request's grace period would; the list of them as they were deleted."""
        selected = self._selected(request, resource)
        grace = await self._grace(request)
        items, rv = self.store.list(resource, namespace)
        gone = []
        for obj in filter(selected, items):
            with contextlib.suppress(status.ApiError):  # removed meanwhile
                gone.append(self.store.delete(resource, namespace, obj["metadata"]["name"], grace))
        return _json({"kind": KINDS[resource] + "List", "apiVersion": "v1",
                      "metadata": {"resourceVersion": str(rv)}, "items": gone})  # fmt: skip

    async def _replace(self, request: web.Request, t: Target, namespace: str) -> dict[str, Any]:
        body = _object(await self._body(request), namespace, t.name)
        expect = body["metadata"].get("resourceVersion")

        def replace(obj: dict[str, Any]) -> dict[str, Any]:
            if t.subresource == "status":
                obj["status"] = body.get("status") or {}
                return obj
            return _keep_status(t.resource, obj, dict(body))

        return self.store.update(t.resource, namespace, t.name or "", replace, expect_rv=expect)

    async def _patch(self, request: web.Request, t: Target, namespace: str) -> dict[str, Any]:
        body = await self._body(request)
        content_type = request.headers.get("Content-Type", "")

        def patch(obj: dict[str, Any]) -> dict[str, Any]:
            new = patches.apply(obj, body, content_type)
            if t.subresource == "status":
                return {**obj, "status": new.get("status")}
            return _keep_status(t.resource, obj, new)

        return self.store.update(t.resource, namespace, t.name or "", patch)

    # -- watch -----------------------------------------------------------------------------

    async def _watch(
        self, request: web.Request, resource: str, namespace: str | None
    ) -> web.StreamResponse:
        """1. Parse the selectors and ``resourceVersion`` (empty or "0": start with every
           matching object as ADDED).
        2. Stream the changes after that version that concern the selection: an object
           that starts matching is ADDED, stops matching is DELETED, as the API server
           does; a version older than the history answers an ERROR event with code 410,
           one not reached yet a 504 ("Too large resource version").
        3. End after ``timeoutSeconds`` (with a BOOKMARK first when allowed)."""
        selected = self._selected(request, resource)
        raw_rv = request.query.get("resourceVersion", "")
        try:
            since = int(raw_rv) if raw_rv not in ("", "0") else None
            timeout = (
                float(request.query["timeoutSeconds"])
                if "timeoutSeconds" in request.query
                else None
            )
        except ValueError as error:
            raise status.ApiError(400, f"invalid watch parameter: {error}") from error
        if since is not None and since > self.store.resource_version:
            # As the API server answers a version it has not reached (after its wait):
            # 504, "Too large resource version" (a cursor from elsewhere).
            raise status.ApiError(
                504,
                f"Too large resource version: {since}, current: {self.store.resource_version}",
                reason="Timeout",
            )
        bookmarks = request.query.get("allowWatchBookmarks") in TRUE
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def notify() -> None:
            loop.call_soon_threadsafe(wake.set)

        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)

        async def send(type_: str, obj: dict[str, Any]) -> None:
            await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

        deadline = None if timeout is None else loop.time() + timeout
        generation = self.dropped
        self.store.subscribe(notify)
        try:
            if since is None:
                items, since = self.store.list(resource, namespace)
                for obj in filter(selected, items):
                    await send("ADDED", obj)
            while not self.closing and self.dropped == generation:
                wake.clear()
                try:
                    changes = self.store.changes_since(since)
                except status.ApiError as error:
                    await send("ERROR", error.body())
                    break
                for change in changes:
                    since = change.rv
                    event = _event(change, resource, namespace, selected)
                    if event:
                        await send(*event)
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    if bookmarks:
                        mark = {"resourceVersion": str(since)}
                        kind = {"kind": KINDS[resource], "apiVersion": "v1"}
                        await send("BOOKMARK", {**kind, "metadata": mark})
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), remaining)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unsubscribe(notify)
        return response

    # -- logs and metrics ----------------------------------------------------------------

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        return await logs.pod_log(self.store, request, namespace, name, lambda: self.closing)

    def _metrics(self, request: web.Request, t: Target, verb: str) -> web.Response:
        if verb not in ("get", "list"):
            raise status.ApiError(405, f"{verb} is not served by metrics.k8s.io")
        if verb == "get":
            return _json(metrics.pod_metrics(self.store, t.namespace or "", t.name or ""))
        selected = self._selected(request, "pods")
        return _json(metrics.pod_metrics_list(self.store, t.namespace, selected))


def _unavailable(code: int) -> status.ApiError:
    return status.ApiError(
        code, "the server is currently unable to handle the request", reason="ServiceUnavailable"
    )


def _object(body: Any, namespace: str, name: str | None) -> dict[str, Any]:
    """A create's or an update's body, checked as the API server checks it before anything
    else: an object, whose namespace and name (if given) are the URL's."""
    if not isinstance(body, dict) or not isinstance(body.setdefault("metadata", {}), dict):
        raise status.ApiError(400, "the object could not be decoded: not a JSON object")
    meta = body["metadata"]
    if meta.get("namespace") and namespace and meta["namespace"] != namespace:
        raise status.ApiError(
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
        )
    if name is not None and meta.get("name") != name:
        raise status.ApiError(
            400, f"the name of the object ({meta.get('name')}) does not match the name on the URL"
            f" ({name})"
        )  # fmt: skip
    return body


def _keep_status(resource: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The main resource never writes ``status`` (its subresource does), and a Pod's spec
    changes only where the API allows."""
    if "status" in old:
        new["status"] = old["status"]
    else:
        new.pop("status", None)
    if resource == "pods":
        validation.pod_update(old, new)
    return new


def _event(change: Change, resource: str, namespace: str | None, selected) -> tuple | None:
    """What a watch on (resource, namespace, selection) sees of one change, if anything."""
    if change.resource != resource or (namespace and change.namespace != namespace):
        return None
    was, now = selected(change.old), selected(change.new)
    if change.type == "DELETED":
        return ("DELETED", change.new) if was else None
    if was and now:
        return ("MODIFIED", change.new)
    if now:
        return ("ADDED", change.new)
    if was:
        return ("DELETED", change.new)
    return None


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    """Where an object sorts in a list (``Store.list``'s order: namespace, then name)."""
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def _chunk(request: web.Request) -> tuple[int, tuple[str, str]]:
    """A list request's ``limit`` (0: all) and the key its ``continue`` token goes on
    after (("", ""): from the start); 400 for either unreadable."""
    try:
        limit = int(request.query.get("limit") or 0)
        if limit < 0:
            raise ValueError(limit)
    except ValueError as error:
        raise status.ApiError(
            400, f"limit: {request.query.get('limit')!r} is not a count"
        ) from error
    token = request.query.get("continue")
    if not token:
        return limit, ("", "")
    try:
        after = json.loads(base64.urlsafe_b64decode(token.encode()))["after"]
        namespace, name = (str(part) for part in after)
    except (binascii.Error, ValueError, KeyError, TypeError) as error:
        raise status.ApiError(400, "continue: the token is not one this server gave") from error
    return limit, (namespace, name)
