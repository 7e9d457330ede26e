"""Pod changes as engine events: a watch with gobrave's label selector, resumed from a
``resourceVersion`` (the event's ``cursor``).

1. The stream opens at the cursor (``since``; none: the list's ``resourceVersion`` now)
   and ends after ``seconds`` (``WATCH_SECONDS``) or when it drops: the monitor reconnects from the
   last cursor it applied.
2. Each watch event becomes the engine-neutral events of what changed (``transitions``):
   the Pod's state (``states.state_of``) against the last one this process saw of it.
   ``ADDED`` gives ``create`` (and what it already is), a new state gives ``start``,
   ``die`` (after ``oom`` when killed for memory) for an exit or a rejection, ``wait``
   when the Pod starts waiting for a node, ``place`` when a Pod that waited for a node
   is scheduled but does not run yet (without it the monitor would not hear that the
   wait ended: the instance would keep showing "waiting for a node" and its timers would
   stay those of a wait; a Pod this process had not seen before, bound to a node and not
   running, gives it too, as this process may have started during the wait), ``DELETED``
   gives ``destroy``.
3. ``410 Gone`` (the cursor is older than the API server keeps): list again with the
   same selector and emit what changed against what this process saw (a Pod gone since:
   ``destroy``), then a ``resync`` event carrying the list's ``resourceVersion`` (no
   container: it only moves the monitor's cursor) and watch on from there. The monitor
   applies an event by asking the engine now, so a transition is neither missed nor
   applied twice. ``BOOKMARK`` events move the cursor the same way.
4. Each event but ``destroy`` carries the Pod's state as the watch event (or the list)
   had it (``EngineEvent.state``): the monitor applies it without reading the Pod
   again where it is surely of the instance's current run (``sync.event_state_current``).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from containers.engines.base import ContainerState, EngineEvent
from containers.engines.kubernetes.states import state_of

WATCH_SECONDS = 300  # a stream ends after this (the default); the monitor reopens it
NO_CONTAINER = "resync"  # an event that only moves the cursor
WAITING_SHAPE = "created/waiting"  # ``_shape`` of a Pod waiting for a node


def _shape(state: ContainerState) -> str:
    """What of a Pod's state makes an event: its status, and whether it waits for room."""
    return WAITING_SHAPE if state.waiting else state.status


def _nano(at: dt.datetime | None) -> int:
    return int(at.timestamp() * 1e9) if at else time.time_ns()


class PodWatch:
    """The watch of one engine object; remembers the last state it saw of each Pod (by
    name: ``(uid, status)``), across streams, so a relist or a reopened stream reports
    only what changed. Thread-safe enough for its one reader (the monitor's follower)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, str]] = {}
        self.lock = threading.Lock()

    def transitions(self, pod: dict[str, Any], kind: str, cursor: str) -> list[EngineEvent]:
        """The events ``pod``'s watch event ``kind`` (ADDED, MODIFIED, DELETED) stands for."""
        meta = pod.get("metadata") or {}
        name, uid = meta.get("name", ""), meta.get("uid", "")
        state = state_of(pod)
        with self.lock:
            before = self.seen.get(name)
            if kind == "DELETED":
                self.seen.pop(name, None)
            else:
                self.seen[name] = (uid, _shape(state))

        def event(action: str, at: int | None = None) -> EngineEvent:
            return EngineEvent(
                action=action,
                runtime_id=name,
                name=name,
                labels=state.labels,
                time_nano=at or time.time_ns(),
                exit_code=state.exit_code if action == "die" else None,
                cursor=cursor,
                state=None if action == "destroy" else state,
            )

        if kind == "DELETED":
            return [event("destroy")]
        events = []
        fresh = before is None or before[0] != uid
        if kind == "ADDED" and fresh:
            events.append(event("create"))
        if not fresh and before is not None and before[1] == _shape(state):
            return events
        # Placed after a wait: seen waiting, or (a Pod this process had not seen: a
        # monitor that started since) bound to a node and not running yet.
        waited = (
            before[1] == WAITING_SHAPE
            if not fresh and before is not None
            else kind != "ADDED" and bool(state.node_name)
        )
        events.extend(self._state_events(state, event, waited=waited))
        return events

    @staticmethod
    def _state_events(
        state: ContainerState, event: Callable[..., EngineEvent], *, waited: bool = False
    ) -> list[EngineEvent]:
        """The events of a Pod now in ``state``; ``waited``: it was waiting for a node."""
        if state.status == "created":
            if state.waiting:
                return [event("wait")]
            return [event("place")] if waited else []
        if state.status == "running":
            return [event("start")]
        if state.status == "exited":
            died = _nano(state.finished_at)
            return [
                *([event("oom", died)] if state.oom_killed else []),
                event("die", died),
            ]
        if state.status == "rejected":
            return [event("die")]
        return []

    def relisted(self, pods: list[dict[str, Any]], cursor: str) -> list[EngineEvent]:
        """What changed between what this process saw and a fresh list of every Pod."""
        listed = {(p.get("metadata") or {}).get("name", ""): p for p in pods}
        events = []
        with self.lock:
            gone = [name for name in self.seen if name not in listed]
        for name in gone:
            events.extend(self.transitions({"metadata": {"name": name}}, "DELETED", cursor))
        for pod in listed.values():
            events.extend(self.transitions(pod, "MODIFIED", cursor))
        events.append(EngineEvent(NO_CONTAINER, "", "", {}, time.time_ns(), cursor=cursor))
        return events


class RawWatch(watch.Watch):
    """The client's ``Watch`` without its model objects: each event's object as the API's
    JSON (``raw_object``), which is all ``stream`` reads. The client would otherwise
    turn every Pod into its model classes (a ``json.dumps`` and a recursive build: 1.6 ms
    a Pod on the project's machine, on the follower's one thread, per event) and throw
    them away. With no return type the client does no more than ``json.loads``, and
    still raises its ``ApiException`` for an ``ERROR`` event (a 410 Gone)."""

    def get_return_type(self, func: Callable[..., Any]) -> None:
        return None


def _too_large(exc: ApiException) -> bool:
    """A watch from a version the cluster has not reached (504 "Too large resource
    version"): a cursor made elsewhere (say, when the runtime was a Docker engine)."""
    return exc.status == 504 and "too large resource version" in str(exc.body or "").lower()


def stream(
    *,
    pods: PodWatch,
    list_pods: Callable[..., Any],
    list_json: Callable[[], dict[str, Any]],
    namespace: str,
    selector: str,
    since: str,
    timeout: float,
    seconds: int = WATCH_SECONDS,
) -> Iterator[EngineEvent]:
    """Follow Pod changes from ``since`` (see the module docstring). ``list_pods`` is the
    client's ``list_namespaced_pod``; ``list_json`` lists every Pod of the selector as the
    API's JSON. Ends when the stream ends or drops; a 410 relists and goes on."""
    cursor = since
    while True:
        watcher = RawWatch()
        gone = False
        try:
            for item in watcher.stream(
                list_pods,
                namespace,
                label_selector=selector,
                resource_version=cursor,
                timeout_seconds=seconds,
                allow_watch_bookmarks=True,
                _request_timeout=(timeout, seconds + timeout),
            ):
                raw = item.get("raw_object") or {}
                kind = item.get("type", "")
                cursor = (raw.get("metadata") or {}).get("resourceVersion") or cursor
                if kind == "BOOKMARK":
                    yield EngineEvent(NO_CONTAINER, "", "", {}, time.time_ns(), cursor=cursor)
                elif kind in ("ADDED", "MODIFIED", "DELETED"):
                    yield from pods.transitions(raw, kind, cursor)
        except ApiException as exc:
            if not (exc.status == 410 or _too_large(exc)):
                return  # the stream ended badly: the monitor reconnects (and reconciles)
            gone = True  # expired, or a cursor this cluster never reached: list again
        except Exception:  # noqa: BLE001 - a dropped stream ends the iterator
            return
        finally:
            watcher.stop()
        if not gone:
            return
        listed = list_json()
        cursor = (listed.get("metadata") or {}).get("resourceVersion") or cursor
        yield from pods.relisted(listed.get("items") or [], cursor)
