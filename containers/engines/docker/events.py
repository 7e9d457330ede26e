"""The Docker engine's lifecycle events of the installation's containers, resumed from a
nanosecond cursor."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors

from containers.engines.base import EngineEvent
from containers.engines.docker.errors import _TRANSPORT_ERRORS, _api_error, _translated
from containers.engines.labels import LABEL_INSTALLATION

EVENT_ACTIONS = frozenset(
    {"create", "start", "die", "oom", "pause", "unpause", "destroy", "stop", "kill"}
)
# Actor.Attributes of a container event mixes the container's labels with these keys.
_EVENT_ATTRIBUTES = frozenset({"name", "image", "exitCode", "signal", "execDuration"})
_NANO = 1_000_000_000


def _to_event(raw: dict[str, Any]) -> EngineEvent | None:
    """One decoded /events message as a EngineEvent, or None when it is not one we follow."""
    action = raw.get("Action") or raw.get("status") or ""
    if raw.get("Type", "container") != "container" or action not in EVENT_ACTIONS:
        return None
    actor = raw.get("Actor") or {}
    attributes: dict[str, str] = actor.get("Attributes") or {}
    exit_code = attributes.get("exitCode")
    time_nano = raw.get("timeNano") or int(raw.get("time", 0)) * _NANO
    return EngineEvent(
        action=action,
        runtime_id=actor.get("ID") or raw.get("id", ""),
        name=attributes.get("name", ""),
        labels={k: v for k, v in attributes.items() if k not in _EVENT_ATTRIBUTES},
        time_nano=int(time_nano),
        exit_code=int(exit_code) if action == "die" and exit_code is not None else None,
    )


class _Events:
    """``DockerEngine``'s event calls (a part of it: uses its ``_api``)."""

    def event_cursor_now(self) -> str:
        """Now on this host's clock, in nanoseconds (the daemon's clock is the same
        machine's or close to it; a skew only replays or skips what the reconcile
        settles)."""
        return str(time.time_ns())

    def events(
        self,
        installation: str,
        since: str | int | None = None,
        *,
        until_nano: int | None = None,
    ) -> Iterator[EngineEvent]:
        """Follow lifecycle events of this installation's containers.

        ``since`` is a cursor (nanoseconds as a string, ``EngineEvent.cursor``). Docker's
        own ``since`` is inclusive and whole-second, so the stream is asked from the
        cursor's second and events before the cursor are dropped here; events at exactly
        the cursor come again (callers drop those they applied). Without ``since`` only
        new events arrive. ``until_nano`` (not in the protocol) ends the stream at that
        time instead of following. Raises EngineError when the daemon is unreachable;
        the iterator simply ends when the stream drops.
        """
        filters = {
            "type": "container",
            "label": f"{LABEL_INSTALLATION}={installation}",
            "event": sorted(EVENT_ACTIONS),
        }
        try:
            since_nano = None if since in (None, "") else int(since)  # type: ignore[arg-type]
        except ValueError:
            since_nano = None  # a cursor of another driver (the row changed driver): from now
        since_second = None if since_nano is None else since_nano // _NANO
        until = None if until_nano is None else f"{until_nano // _NANO}.{until_nano % _NANO:09d}"
        with _translated("events"):
            stream = self._api().events(
                since=since_second, until=until, filters=filters, decode=True
            )
        return self._follow(stream, since_nano or 0)

    @staticmethod
    def _follow(stream: Any, since_nano: int = 0) -> Iterator[EngineEvent]:
        try:
            while True:
                try:
                    raw = next(stream)
                except StopIteration:
                    return
                except docker.errors.APIError as exc:
                    raise _api_error("events", exc) from exc
                except (*_TRANSPORT_ERRORS, docker.errors.DockerException, ValueError):
                    return  # the stream dropped or was cut mid-message: the caller reconnects
                try:
                    event = _to_event(raw) if isinstance(raw, dict) else None
                except (ValueError, TypeError):
                    event = None  # one malformed message must not stop the stream for good
                if event is not None and event.time_nano >= since_nano:
                    yield event
        finally:
            with contextlib.suppress(Exception):
                stream.close()
