"""``pods/log``: a container's lines as the kubelet serves them through the API server,
from the store's log buffer (the fake kubelet and the test write it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from tests.kube import status
from tests.kube.query import TRUE
from tests.kube.store import LogLine, Store


async def pod_log(
    store: Store,
    request: web.Request,
    namespace: str,
    name: str,
    closing: Callable[[], bool],
) -> web.StreamResponse:
    """``pods/log``: the container's lines, ``tailLines``, ``sinceSeconds``,
    ``timestamps``, ``limitBytes``; with ``follow=true`` new lines as they are written,
    until the container terminates or the Pod goes. 400 while the container waits to
    start (as the kubelet answers) and for ``previous`` (no container here ever
    restarts); 500 when its node is lost."""
    pod = store.get("pods", namespace, name)
    container = _container(pod, request.query.get("container"))
    q = request.query
    if q.get("previous") in TRUE:
        raise status.ApiError(
            400, f'previous terminated container "{container}" in pod "{name}" not found'
        )
    if pod.get("status", {}).get("reason") == "NodeLost":  # the API server cannot reach it
        host = pod["status"].get("hostIP", "")
        raise status.ApiError(
            500,
            f'Get "https://{host}:10250/containerLogs/{namespace}/{name}/{container}":'
            f" dial tcp {host}:10250: connect: no route to host",
        )
    state = _state(pod, container)
    if "waiting" in state or not state:
        reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
        raise status.ApiError(
            400, f'container "{container}" in pod "{name}" is waiting to start: {reason}'
        )
    try:
        tail = int(q["tailLines"]) if "tailLines" in q else None
        since = int(q["sinceSeconds"]) if "sinceSeconds" in q else None
        limit = int(q["limitBytes"]) if "limitBytes" in q else None
    except ValueError as error:
        raise status.ApiError(400, f"invalid log parameter: {error}") from error
    stamps = q.get("timestamps") in TRUE
    uid = pod["metadata"]["uid"]
    lines = store.log_lines(uid, container)
    sent = len(lines)
    if since is not None:
        cut = datetime.now(UTC) - timedelta(seconds=since)
        lines = [line for line in lines if line.time >= cut]
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    body = b"".join(_line(line, stamps) for line in lines)
    if limit is not None:
        body = body[:limit]
    if q.get("follow") not in TRUE:
        return web.Response(body=body, content_type="text/plain")

    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def notify() -> None:
        loop.call_soon_threadsafe(wake.set)

    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    store.subscribe(notify)
    try:
        await response.write(body)
        while not closing():
            wake.clear()
            fresh = store.log_lines(uid, container, sent)
            sent += len(fresh)
            for line in fresh:
                await response.write(_line(line, stamps))
            try:
                pod = store.get("pods", namespace, name)
            except status.ApiError:
                break
            if pod["metadata"]["uid"] != uid or "terminated" in _state(pod, container):
                for line in store.log_lines(uid, container, sent):
                    await response.write(_line(line, stamps))
                break
            await wake.wait()
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.unsubscribe(notify)
    return response


def _container(pod: dict[str, Any], wanted: str | None) -> str:
    names = [c["name"] for c in pod["spec"]["containers"]]
    name = pod["metadata"]["name"]
    if wanted is None:
        if len(names) > 1:
            raise status.ApiError(
                400,
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(names)}]",
            )
        return names[0]
    if wanted not in names:
        raise status.ApiError(400, f"container {wanted} is not valid for pod {name}")
    return wanted


def _state(pod: dict[str, Any], container: str) -> dict[str, Any]:
    for found in pod.get("status", {}).get("containerStatuses") or []:
        if found["name"] == container:
            return found.get("state") or {}
    return {}


def _line(line: LogLine, stamps: bool) -> bytes:
    text = line.text + "\n"
    if stamps:
        text = line.time.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") + text
    return text.encode()
