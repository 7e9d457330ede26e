"""The follower: one thread per engine that reads its event stream and hands each event
to the monitor's appliers (see the package docstring, step 2)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING

from django.db import connection

from containers.actors import MONITOR
from containers.engines import driver_class, engine_for
from containers.engines.base import EngineError, EngineEvent
from containers.engines.calls import engine_ping
from containers.engines.labels import LABEL_INSTANCE
from containers.execution.health import runtime_rows_health_record
from containers.execution.inbox import Inbox
from containers.execution.monitor.cursors import (
    CURSOR_STORE_EVERY,
    Position,
    StreamSeen,
    cursor_for,
    cursor_move,
    cursor_store,
    is_duplicate,
    position_after,
)
from containers.execution.monitor.events import (
    _instance_of,
    batchable,
    event_run_apply,
    event_state_look,
    needs_recheck,
)
from containers.models import ContainerInstance, MonitorCursor, Runtime

if TYPE_CHECKING:
    from containers.execution.monitor.loop import Monitor

log = logging.getLogger(__name__)

BACKOFF_FIRST = 1.0

HEALTHY_STREAM = 60.0  # a stream that lasted this long restarts the backoff

INBOX_MAX = 1024  # events read ahead of the appliers per engine (``BATCH``: inbox.py)


class Follower:
    """Follows one engine's event stream in its own thread (see the package docstring).

    The thread only reads: each event goes to its ``inbox`` (``containers.execution.inbox``)
    and the monitor's appliers apply it, in parallel across instances, in order for each
    one, so while it waits on its stream it holds no database connection; it takes one
    (a ``Monitor.db`` slot) only for its own few writes at each (re)connect: the runtime
    row, the cursor, the health record.
    """

    def __init__(self, monitor: Monitor, runtime: Runtime) -> None:
        self.monitor = monitor
        self.runtime_id = runtime.pk
        self.runtime = runtime  # the session's row (event_apply's engine)
        self.name = runtime.name
        self.step = threading.Lock()  # held while the cursor moves or is stored
        self.wake = threading.Event()  # ends a wait to reconnect (the engine is back)
        self.cursor: MonitorCursor | None = None  # the session's, ahead of the stored one
        self.seen = StreamSeen()  # the session's, noted in the stream's order
        self.read = Position()  # where the stream got (the inbox's newest mark)
        self.reached = 0  # the sequence number of the mark the cursor was moved to
        self.inbox = Inbox(
            shards=monitor.appliers.size,
            limit=INBOX_MAX,
            schedule=monitor.appliers.schedule,
            stopping=monitor.stopping,
            apply=self.apply_many,
            reached=self._cursor_reach,
        )
        self.thread = threading.Thread(target=self.run, name=f"monitor-{self.name}", daemon=True)

    def run(self) -> None:
        try:
            self._loop()
        finally:
            connection.close()

    def _loop(self) -> None:
        stopping = self.monitor.stopping
        delay = BACKOFF_FIRST
        while not stopping.is_set():
            began = time.monotonic()
            runtime = None
            try:
                with self.monitor.db():
                    runtime = Runtime.objects.filter(pk=self.runtime_id, enabled=True).first()
                    if runtime is None:
                        log.info("runtime %s is disabled or gone; no longer followed", self.name)
                        return
                    cursor = cursor_for(runtime)
                self.session(runtime, cursor)
                if stopping.is_set():
                    return
                problem = "event stream dropped"
            except EngineError as exc:
                problem = f"engine unreachable ({exc})"
                if runtime is not None:
                    self.health_record(runtime, reachable=False, error=str(exc))
            except Exception as exc:  # noqa: BLE001 - the monitor outlives any one failure
                log.exception("monitor of runtime %s failed", self.name)
                problem = f"unexpected error ({exc.__class__.__name__})"
            if time.monotonic() - began > HEALTHY_STREAM:
                delay = BACKOFF_FIRST
            log.warning(
                "runtime %s: %s; reconnecting in %.0fs from the stored cursor",
                self.name,
                problem,
                delay,
            )
            self._wait(delay)
            delay = min(delay * 2, self.monitor.backoff_cap)

    def _wait(self, seconds: float) -> None:
        """Wait to reconnect: ``seconds``, or less if the monitor stops or the heartbeat
        finds the engine back (``wake``)."""
        until = time.monotonic() + seconds
        while not self.monitor.stopping.is_set() and (left := until - time.monotonic()) > 0:
            if self.wake.wait(min(left, 0.25)):
                self.wake.clear()
                return

    def health_record(self, runtime: Runtime, *, reachable: bool, error: str = "") -> None:
        """Record what the stream learnt of its engine on every row of that daemon: a
        stream that opened says it answers; a failed open is confirmed with a bounded ping
        first (an engine that answered with an error is not away; no connection held
        meanwhile). So an engine that goes away is recorded unreachable at the
        follower's next reconnect, seconds after its stream dropped, not at the next
        reconcile pass. Never raises."""
        try:
            if not reachable:
                reachable, error = engine_ping(runtime=runtime)
            with self.monitor.db():
                runtime_rows_health_record(
                    runtime=runtime, reachable=reachable, error=error, actor=MONITOR
                )
        except Exception:  # noqa: BLE001 - the follower outlives a failed write (DB away)
            log.warning("runtime %s: health not recorded", self.name, exc_info=True)

    def session(self, runtime: Runtime, cursor: MonitorCursor | None = None) -> int:
        """One connection: open the stream from the cursor (``cursor``: the runtime's,
        read already), ask for a reconcile, hand events to the appliers until the stream
        ends, wait until they are applied, store the cursor. Returns how many events
        arrived."""
        engine = engine_for(runtime)
        if cursor is None or not cursor.position:
            with self.monitor.db():
                cursor = cursor or cursor_for(runtime)
                if not cursor.position:  # first run: from now; the reconcile covers the past
                    cursor.position = engine.event_cursor_now()
                    cursor.save(update_fields=["position", "updated_at"])
        stream = engine.events(self.monitor.installation, cursor.position)
        with self.step:
            self.cursor, self.runtime, self.seen = cursor, runtime, StreamSeen()
            self.read = Position(cursor.position, tuple(cursor.seen))
        self.health_record(runtime, reachable=True)
        log.info("following runtime %s (%s) from cursor %s", runtime.name, runtime.base_url, cursor)
        self.monitor.reconcile_soon()
        count = 0
        try:
            for event in stream:
                if self.monitor.stopping.is_set():
                    return count
                self.deliver(event)
                count += 1
        finally:
            self.drained()
            with self.step, self.monitor.db():
                self.cursor_store()
        return count

    def deliver(self, event: EngineEvent) -> None:
        """Hand one event to the appliers (in the stream's order): noted in the
        session's ``StreamSeen``, dropped if a duplicate (``is_duplicate``), else filed in
        the inbox by its instance; waits while ``INBOX_MAX`` are unapplied (the engine
        then holds the rest). The follower's thread only."""
        self.seen.note(event)
        if is_duplicate(self.read, event):
            return
        self.read = position_after(self.read, event)
        key = event.labels.get(LABEL_INSTANCE) or event.runtime_id
        self.inbox.put(event, key=key, clean=self.seen.clean_exit(event), mark=self.read)

    def drained(self) -> None:
        """Wait until every event handed over is applied (or the monitor stops)."""
        self.inbox.drained()

    def _apply_logged(
        self, event: EngineEvent, clean: bool, read: ContainerInstance | None = None
    ) -> None:
        """``apply``, from an applier. An event that fails (the engine or the database
        away) is logged and a reconcile asked for, which compares every instance with
        its engine: the next events still go."""
        try:
            self.apply(event, clean, read)
        except EngineError as exc:  # the engine went away mid-look
            log.warning("runtime %s: event not applied (%s)", self.name, exc)
            self.monitor.reconcile_soon()  # the reconcile repairs what it missed
        except Exception:  # noqa: BLE001 - the next events still come (DB away...)
            log.exception("runtime %s: event %s not applied", self.name, event.action)
            self.monitor.reconcile_soon()

    def apply(
        self, event: EngineEvent, clean: bool = False, read: ContainerInstance | None = None
    ) -> None:
        """Apply one event (``event_state_apply``; ``clean``: a clean exit as the
        stream's order says; ``read``: its instance's row as read just now) and look at
        it again if it found its instance busy."""
        look = event_state_look(runtime=self.runtime, event=event, clean_exit=clean, read=read)
        self._recheck_if_needed(event, look.outcome, look.status)

    def _recheck_if_needed(self, event: EngineEvent, outcome: str, status: str = "") -> None:
        start_runs = driver_class(self.runtime.driver).start_runs
        if needs_recheck(event, outcome, start_runs=start_runs, status=status):
            self.monitor.recheck(event.labels[LABEL_INSTANCE])

    def apply_many(self, items: list[tuple[EngineEvent, bool]]) -> None:
        """Apply a shard's events (``(event, clean)``) in their order, from an applier:
        each run of ``batchable`` events of distinct instances in one transaction
        (``event_run_apply``), the others one at a time (``apply``). Never raises."""
        run: list[tuple[EngineEvent, bool]] = []
        ids: set[uuid.UUID] = set()
        for event, clean in items:
            key = batchable(event, clean)
            if run and (key is None or key in ids):
                self._run_apply(run)
                run, ids = [], set()
            if key is None:
                self._apply_logged(event, clean)
            else:
                run.append((event, clean))
                ids.add(key)
        if run:
            self._run_apply(run)

    def _run_apply(self, run: list[tuple[EngineEvent, bool]]) -> None:
        """``event_run_apply`` of ``run``, also of a run of one (its lock, one pipelined
        send of its writes and a commit: fewer round trips than a look of its own, which
        reads the row before locking it and waits for each write); what it leaves goes
        one at a time, from the row it read (or all, read again, if its transaction
        failed: a deadlock, the database away)."""
        left: dict[uuid.UUID, ContainerInstance] = {}
        try:
            outcomes = event_run_apply(run=run, runtime=self.runtime, left=left)
        except Exception:  # noqa: BLE001 - rolled back: each is applied on its own
            log.warning("runtime %s: %d events not applied together", self.name, len(run),
                        exc_info=True)  # fmt: skip
            outcomes, left = [None] * len(run), {}
        for (event, clean), outcome in zip(run, outcomes, strict=True):
            if outcome is None:
                self._apply_logged(event, clean, left.get(_instance_of(event)))
            else:
                self._recheck_if_needed(event, outcome)

    def _cursor_reach(self, seq: int, mark: Position) -> None:
        """The inbox's watermark moved to ``mark``: move the session's cursor there
        (stored at most every ``CURSOR_STORE_EVERY``; the main thread stores the rest).
        From an applier's thread; an earlier mark than the cursor's is left."""
        try:
            with self.step:
                if self.cursor is None or seq <= self.reached:
                    return
                self.reached = seq
                cursor_move(self.cursor, mark, store_every=CURSOR_STORE_EVERY)
        except Exception:  # noqa: BLE001 - a cursor not stored replays a few events
            log.warning("runtime %s: cursor not stored", self.name, exc_info=True)

    def cursor_store(self, every: float = 0.0) -> None:
        """Store what the session's cursor reached, if that was not done in the last
        ``every`` seconds (at the end of a session; by the monitor's main thread while
        the stream is quiet, and at its stop); never raises: a cursor not stored replays
        a few events, which changes nothing."""
        try:
            if self.cursor is not None:
                cursor_store(self.cursor, every=every)
        except Exception:  # noqa: BLE001 - the database may be what ended the session
            log.warning("runtime %s: cursor not stored", self.name, exc_info=True)
