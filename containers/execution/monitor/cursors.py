"""Where an engine's event stream got (its cursor: stored, or a ``Position`` not
stored), which events are replays of those already applied, and what one session of the
stream saw of each container since its create (``StreamSeen``)."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from containers.engines.base import EngineEvent
from containers.models import MonitorCursor, Runtime
from core import prepared

SEEN_MAX = 64  # keys remembered at the cursor's exact time (a handful in practice)
# A follower's cursor is stored at most this often (by the main thread when the stream
# goes quiet), and when its stream ends: a burst of events costs a write a second, not
# one each (a monitor killed meanwhile replays the last second's events: each is applied
# as the engine says now, which changes nothing).
CURSOR_STORE_EVERY = 1.0


def event_key(event: EngineEvent) -> str:
    return f"{event.runtime_id}/{event.action}"


def cursor_for(runtime: Runtime) -> MonitorCursor:
    """The runtime's cursor row, made on first use with no position (no cursor yet)."""
    cursor, _ = MonitorCursor.objects.get_or_create(runtime=runtime)
    return cursor


@dataclass(frozen=True)
class Position:
    """Where a stream got (a cursor's ``position`` and ``seen``, not stored)."""

    position: str = ""
    seen: tuple[str, ...] = ()


def position_after(at: MonitorCursor | Position, event: EngineEvent) -> Position:
    """Where the cursor ``at`` is once ``event`` is applied (the stream's order is the
    cursor's): at the event's cursor, remembering the keys seen exactly there."""
    if event.cursor != at.position:
        return Position(event.cursor, (event_key(event),))
    return Position(at.position, (*at.seen, event_key(event))[-SEEN_MAX:])


def is_duplicate(cursor: MonitorCursor | Position, event: EngineEvent) -> bool:
    """True for an event already applied: one seen at the cursor's exact position.

    The cursor is opaque (``EngineEvent.cursor``): the driver never sends an event from
    before it (``Engine.events``), but may send those *at* it again (Docker's ``since``
    is inclusive); their keys at exactly ``position`` tell them apart from a new event
    with the same cursor (Docker: stamped the same nanosecond).
    """
    return event.cursor == cursor.position and event_key(event) in cursor.seen


def cursor_advance(cursor: MonitorCursor, event: EngineEvent, *, store_every: float = 0.0) -> None:
    """Move the cursor to ``event`` (the stream's order is the cursor's); store it unless
    it was stored less than ``store_every`` seconds ago (``cursor_store`` stores the
    rest)."""
    cursor_move(cursor, position_after(cursor, event), store_every=store_every)


def cursor_move(cursor: MonitorCursor, to: Position, *, store_every: float = 0.0) -> None:
    """Move the cursor to ``to``; stored as ``cursor_advance`` says."""
    cursor.position, cursor.seen = to.position, list(to.seen)
    cursor.unstored = True
    cursor_store(cursor, every=store_every)


def cursor_store(cursor: MonitorCursor, *, every: float = 0.0) -> None:
    """Store the cursor if it moved since it was last stored, ``every`` seconds ago or
    more."""
    due = time.monotonic() - getattr(cursor, "stored_at", -math.inf) >= every
    if due and getattr(cursor, "unstored", False):
        prepared.update(cursor, ("position", "seen", "updated_at"))
        cursor.unstored, cursor.stored_at = False, time.monotonic()


class StreamSeen:
    """What one session of an engine's event stream saw of each container since its
    ``create``: how many ``start`` events, and whether an ``oom`` came.

    A stream delivers a daemon's events in order, so a container whose ``create`` this
    session saw has had every later event of it seen too. Its ``die`` with exit code 0
    after exactly one start and no ``oom`` is then the end of the run its create began,
    as the engine will report it (``clean_exit``). Kept per session (a new stream starts
    empty: what happened while none was open is unknown) and bounded (the oldest
    containers are forgotten: their exits are applied the usual way).
    """

    MAX = 4096

    def __init__(self) -> None:
        self._runs: OrderedDict[str, tuple[int, bool]] = OrderedDict()

    def note(self, event: EngineEvent) -> None:
        key = event.runtime_id
        if event.action == "create":
            self._runs[key] = (0, False)
            self._runs.move_to_end(key)
            while len(self._runs) > self.MAX:
                self._runs.popitem(last=False)
        elif key in self._runs:
            starts, oom = self._runs[key]
            if event.action == "start":
                self._runs[key] = (starts + 1, oom)
            elif event.action == "oom":
                self._runs[key] = (starts, True)
            elif event.action == "destroy":
                del self._runs[key]

    def clean_exit(self, event: EngineEvent) -> bool:
        """True for a ``die`` with exit code 0 ending the only run since the create."""
        return (
            event.action == "die"
            and event.exit_code == 0
            and self._runs.get(event.runtime_id) == (1, False)
        )
