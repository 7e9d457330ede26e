"""The monitor: follow each engine's event stream and apply it (contract §5).

``manage.py run_monitor`` runs one ``Monitor``:

1. At start, refresh the templates' image status (``refresh_image_status_on_start``).
2. One follower thread per engine (enabled runtimes; rows sharing a daemon share one)
   opens the engine's event stream for our installation label from its stored cursor,
   asks for a full reconcile (events alone are lossy), and files each event in its
   inbox (``containers.execution.inbox``: one shard per applier, by instance), which
   the appliers (``containers.execution.appliers``: ``monitor_appliers`` threads shared
   by every engine) apply in parallel across instances and in the stream's order for
   each instance, as ``event_apply`` does: map it to the instance (label
   ``io.gobrave.instance``), inspect the container and apply ``target_for`` of what the
   engine says now (more reliable than the event alone), except where the event
   carries the container's state of the instance's current run (a Kubernetes watch
   event carries the Pod: ``sync.event_state_current``) or is a clean exit of a
   container followed from its create (``StreamSeen``), which are applied from the
   event; then move the cursor to the inbox's watermark (the last event before which
   all are applied; stored at most once a second, ``CURSOR_STORE_EVERY``). A follower
   holds no database connection while it waits on its stream: it takes one
   (``Monitor.db``, ``FOLLOWER_DB_SLOTS`` at once) only for its own rows at each
   (re)connect. So N engines cost N follower threads and
   at most 2 + ``monitor_appliers`` + ``FOLLOWER_DB_SLOTS`` connections (one the
   heartbeat's), whatever N is (docs/architecture.md, "The monitor at fleet size"). A dropped stream
   (the SDK just ends the iterator) or an unreachable engine is logged and retried with
   a backoff capped at ``BACKOFF_CAP``; the monitor never exits on engine trouble.
3. A heartbeat thread (``containers.execution.heartbeat``) pings every engine every
   ``engine_ping_interval`` and records its health on its runtime rows; an engine that
   answers again after being recorded unreachable gets a reconcile at once, and its
   follower, if waiting to reconnect, is woken.
4. The main thread renews the monitor's liveness mark every ``poll_interval`` (a live
   process at a dispatcher's start, ``outbox.liveness``) and runs the reconcile: after
   every (re)connect and every ``reconcile_interval``, and looks for newly enabled
   runtimes. It also looks again at
   instances whose event found their worker busy (the worker may have inspected the
   engine just before the event): 50 ms later, then less and less often (at most a
   second apart), until the worker is done; and stores the cursor of a follower whose
   stream went quiet. Every ``container.policies.interval`` it runs the lifecycle
   policies' pass (``containers.execution.policies``).
5. SIGTERM sets a flag: the main thread finishes its step, waits until no follower is
   applying events (a follower blocked reading its stream holds nothing), and returns,
   so the process exits 0.
Each step calls ``close_old_connections()``; each thread closes its connections at exit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from containers.actors import MONITOR, RECONCILER
from containers.counters import RequestStat
from containers.engines import driver_class, engine_for
from containers.engines.base import EngineError, EngineEvent
from containers.engines.calls import engine_ping
from containers.engines.labels import LABEL_INSTANCE
from containers.execution.appliers import Appliers
from containers.execution.event_batch import Seen, events_apply
from containers.execution.health import runtime_rows_health_record
from containers.execution.heartbeat import Heartbeat
from containers.execution.images import template_images_refresh
from containers.execution.inbox import Inbox
from containers.execution.policies import policies_pass
from containers.execution.reconciler import distinct_engines, engine_key, reconcile
from containers.execution.sync import (
    Sync,
    clean_exit_apply,
    instance_read,
    instance_sync,
    running_as_recorded,
)
from containers.installation import installation_id
from containers.models import ContainerInstance, MonitorCursor, Runtime
from containers.states import ACTIVE_SLOTS
from core import prepared
from core.loops import StopOnSignal
from outbox import conf as outbox_conf
from outbox import liveness
from webhooks.services import webhook_limit_hits_notify

log = logging.getLogger(__name__)

# Events after which the container's state may differ from what the instance says.
# ``wait``: the engine waits for room of its own (a Pod waiting for a node); ``place``:
# that wait ended (the Pod was scheduled), so the reason clears and the timers change.
APPLIED_ACTIONS = frozenset({"start", "die", "oom", "pause", "unpause", "destroy", "wait", "place"})
BACKOFF_FIRST = 1.0
BACKOFF_CAP = 30.0
HEALTHY_STREAM = 60.0  # a stream that lasted this long restarts the backoff
# An event that found a worker busy is looked at again soon, then less and less often
# (the worker usually finishes within tens of ms: a container that exits right after its
# start is then seen at once, not a second later)...
LIMIT_NOTICE_EVERY = 10.0  # seconds between looks at the refusal counter (webhooks)
RECHECK_FIRST = 0.05
RECHECK_AFTER = 1.0  # ...at most this far apart...
RECHECK_FOR = 300.0  # ...for at most this long (the periodic reconcile covers the rest)
SEEN_MAX = 64  # keys remembered at the cursor's exact time (a handful in practice)
# A follower's cursor is stored at most this often (by the main thread when the stream
# goes quiet), and when its stream ends: a burst of events costs a write a second, not
# one each (a monitor killed meanwhile replays the last second's events: each is applied
# as the engine says now, which changes nothing).
CURSOR_STORE_EVERY = 1.0
INBOX_MAX = 1024  # events read ahead of the appliers per engine (``BATCH``: inbox.py)
FOLLOWER_DB_SLOTS = 2  # followers writing their own rows (at a reconnect) at once

# event_apply outcomes, besides instance_sync's
DUPLICATE = "duplicate"
IGNORED = "ignored"


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


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


def event_apply(
    *,
    runtime: Runtime,
    cursor: MonitorCursor,
    event: EngineEvent,
    seen: StreamSeen | None = None,
    store_every: float = 0.0,
) -> str:
    """Apply one runtime event, at least once; a replay is recognised and ignored.

    Must run outside a transaction (``instance_sync`` inspects the engine first, then
    applies under the instance's row lock). ``seen``: the session's ``StreamSeen``
    (noted here, replays included: the stream's order is what it relies on). Steps:
    1. A duplicate (see ``is_duplicate``) changes nothing.
    2. Events that cannot change a state (create, kill, stop) and containers whose
       label names no instance (orphans: the reconciler's business) only move the cursor.
    3. A clean exit (``StreamSeen.clean_exit``) is applied from the event
       (``sync.clean_exit_apply``: the instance still records that container and is
       ``creating`` or ``running``), also while the create's worker still holds its
       request.
    4. A ``start`` of the container a ``running`` instance records says nothing new
       (``sync.running_as_recorded``): ``unchanged``, without asking the engine.
    5. Otherwise ``instance_sync`` the instance with actor ``monitor``: inspect (or take
       the state the event carries, where it is surely of the instance's current run:
       ``sync.event_state_current``), then apply ``target_for`` by the shortest true
       path; history entries carry the event.
       A ``destroy`` leaves no container: "removed outside gobrave", unless the instance
       is being deleted (our own delete did it).
    6. Advance the cursor (after applying, so a crash replays rather than loses; stored
       at most every ``store_every`` seconds: a replay changes nothing).
    Returns the outcome (``duplicate``, ``ignored``, or ``clean_exit_apply``'s or
    ``instance_sync``'s).
    """
    if seen is not None:
        seen.note(event)
    if is_duplicate(cursor, event):
        return DUPLICATE
    clean = seen is not None and seen.clean_exit(event)
    outcome = event_state_apply(runtime=runtime, event=event, clean_exit=clean)
    cursor_advance(cursor, event, store_every=store_every)
    return outcome


def _instance_of(event: EngineEvent) -> uuid.UUID | None:
    """The instance an event may change: one named by its label, for an action after
    which a state may differ (``APPLIED_ACTIONS``)."""
    if event.action not in APPLIED_ACTIONS:
        return None
    try:
        return uuid.UUID(event.labels.get(LABEL_INSTANCE, ""))
    except ValueError:
        return None


def _event_data(event: EngineEvent) -> dict[str, Any]:
    """What the history entries an event makes carry."""
    return {
        "event": event.action,
        "time_nano": event.time_nano,
        "container_id": event.runtime_id,
        **({"exit_code": event.exit_code} if event.exit_code is not None else {}),
    }


def _outcome_log(event: EngineEvent, instance_id: uuid.UUID | None, outcome: str) -> None:
    if outcome not in (IGNORED, Sync.SKIPPED):
        log.log(
            logging.DEBUG if outcome == Sync.BUSY else logging.INFO,
            "event %s of %s (instance %s): %s",
            event.action,
            event.name or event.runtime_id[:12],
            instance_id,
            outcome,
        )


def event_state_apply(*, runtime: Runtime, event: EngineEvent, clean_exit: bool = False) -> str:
    """Steps 2 to 5 of ``event_apply``: what ``event`` says, applied to its instance, with
    no cursor (the caller moves it). ``clean_exit``: ``StreamSeen.clean_exit`` of the
    event at its place in the stream. Must run outside a transaction."""
    return event_state_look(runtime=runtime, event=event, clean_exit=clean_exit).outcome


@dataclass(frozen=True)
class Look:
    """What ``event_state_look`` did (``outcome``: as ``event_state_apply``'s) and the
    instance's state as it read it before (``status``: '' when it read none)."""

    outcome: str
    status: str = ""


def event_state_look(
    *,
    runtime: Runtime,
    event: EngineEvent,
    clean_exit: bool = False,
    read: ContainerInstance | None = None,
) -> Look:
    """``event_state_apply``, saying also the state it read the instance in: a ``BUSY``
    outcome's, for ``needs_recheck`` (which then reads the row no second time).
    ``read``: the instance's row as the caller read it just now (``event_run_apply``'s
    transaction, which left the event to this look), instead of reading it again."""
    outcome = IGNORED
    instance_id = _instance_of(event)
    applies = instance_id is not None
    data = _event_data(event)
    clean = None
    if applies and clean_exit:
        clean = clean_exit_apply(
            instance_id=instance_id, runtime_id=event.runtime_id, actor=MONITOR, data=data
        )
    instance = None
    if applies and clean is None:
        instance = read if read is not None else instance_read(instance_id)
    if clean is not None:
        outcome = clean
    elif instance is None:
        pass
    elif not on_this_engine(instance, runtime):
        pass  # a create placed again elsewhere left it here: the orphan scan's
    elif event.action == "start" and running_as_recorded(instance, event.runtime_id, "running"):
        outcome = Sync.UNCHANGED
    else:
        outcome = instance_sync(
            instance_id=instance_id,
            actor=MONITOR,
            engine=engine_for(runtime),
            data=data,
            read=instance,
            seen_state=event.state,
        )
    _outcome_log(event, instance_id, outcome)
    return Look(outcome, instance.status if instance is not None else "")


def batchable(event: EngineEvent, clean_exit: bool) -> uuid.UUID | None:
    """The instance of an event that may be applied with others (``event_run_apply``):
    one that may change its state and that the event alone may settle (a clean exit, or
    a state it carries); None otherwise."""
    if not clean_exit and event.state is None:
        return None
    return _instance_of(event)


def event_run_apply(
    *,
    run: list[tuple[EngineEvent, bool]],
    runtime: Runtime,
    left: dict[uuid.UUID, ContainerInstance] | None = None,
) -> list[str | None]:
    """Apply ``run`` (``(event, clean_exit)`` of distinct instances, each ``batchable``)
    in one transaction (``event_batch.events_apply``); each event's outcome, None for one
    left to ``event_state_apply``. Raises what the database raised, nothing applied.
    Must run outside a transaction. ``left``: as ``events_apply``'s (the rows of the
    instances left to the caller, as read)."""
    seen = []
    for event, clean in run:
        instance_id = _instance_of(event)
        assert instance_id is not None
        seen.append(Seen(instance_id, event.runtime_id, event.state, clean, _event_data(event)))
    found = events_apply(seen=seen, actor=MONITOR, runtime_pk=runtime.pk, left=left)
    outcomes: list[str | None] = []
    for (event, _), each in zip(run, seen, strict=True):
        outcome = found.get(each.instance_id)
        if outcome is not None:
            _outcome_log(event, each.instance_id, outcome)
        outcomes.append(outcome)
    return outcomes


def on_this_engine(instance: Any, runtime: Runtime) -> bool:
    """The instance is placed on ``runtime``'s engine (its row, or another row of the same
    daemon). One that is not (a create placed again elsewhere before its container was
    recorded may have left one here, never started) takes no event from this engine:
    its own engine says what its state is."""
    if instance.runtime_id in (None, runtime.pk):
        return True
    other = Runtime.objects.filter(pk=instance.runtime_id).first()
    return other is not None and engine_key(other) == engine_key(runtime)


def needs_recheck(
    event: EngineEvent, outcome: str, *, start_runs: bool = True, status: str = ""
) -> bool:
    """Whether an event the monitor could not apply must be looked at again (``recheck``).

    An event that found the instance moving (``RACED``), or its worker at work (``BUSY``),
    is, except a ``start`` while the instance is ``creating`` or ``starting``: the worker
    that holds that create or start made the start call, and inspects the container after
    it returns, so it sees at least what the event says; anything that happens later
    (``die``, ``oom``, ``pause``) comes with events of its own, which are rechecked. In a
    burst of creates this spares every create a series of looks and an inspect. Only on
    an engine whose ``start`` returns once the container runs (``start_runs``): on
    Kubernetes the worker's inspect may see the Pod still pending and the ``start``
    event come just after it, so that ``start`` is looked at again too (else the
    instance stays ``creating`` until the next reconcile). ``status``: the instance's
    state as the look that found its worker busy read it (``Look.status``); what the
    worker did since (moved it to ``running``) asks no second look. Without it the row
    is read now.
    """
    if outcome == Sync.RACED:
        return True
    if outcome != Sync.BUSY:
        return False
    if event.action != "start" or not start_runs:
        return True
    if not status:
        instance = instance_read(event.labels[LABEL_INSTANCE])
        status = instance.status if instance is not None else ""
    return status not in ACTIVE_SLOTS


class Follower:
    """Follows one engine's event stream in its own thread (see the module docstring).

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


class Monitor(StopOnSignal):
    """The ``run_monitor`` process (see the module docstring). One per installation is
    enough; more are safe (every change is a compare under the instance's row lock)."""

    def __init__(
        self,
        *,
        installation: str | None = None,
        reconcile_interval: float | None = None,
        backoff_cap: float = BACKOFF_CAP,
        appliers: int | None = None,
    ) -> None:
        self.installation = installation or installation_id()
        self.reconcile_interval = float(reconcile_interval or _config()["reconcile_interval"])
        self.policy_interval = float(_config()["policies"]["interval"])
        self.backoff_cap = backoff_cap
        self.stopping = threading.Event()
        self.appliers = Appliers(int(appliers or _config()["monitor_appliers"]), self.stopping)
        self._db_slots = threading.BoundedSemaphore(FOLLOWER_DB_SLOTS)
        self.reconcile_wanted = threading.Event()
        self.followers: dict[tuple[str, str], Follower] = {}
        self._rechecks: dict[str, tuple[float, float, float]] = {}  # id -> (due, end, gap)
        self._rechecks_lock = threading.Lock()
        self.beat_name = liveness.beat_name(liveness.MONITOR)
        self.heartbeat = Heartbeat(stopping=self.stopping, on_return=self.engine_returned)

    def engine_returned(self, runtime: Runtime) -> None:
        """The heartbeat found an engine recorded unreachable answering again: reconcile
        now (its instances are settled from what it holds) and let its follower
        reconnect at once instead of at the end of its backoff."""
        self.reconcile_soon()
        follower = self.followers.get(engine_key(runtime))
        if follower is not None:
            follower.wake.set()

    @contextlib.contextmanager
    def db(self) -> Iterator[None]:
        """A follower's database work: one of ``FOLLOWER_DB_SLOTS`` at a time, and its
        connection closed (given back to the pool) as soon as it is done."""
        with self._db_slots:
            try:
                close_old_connections()
                yield
            finally:
                connection.close()

    def reconcile_soon(self) -> None:
        self.reconcile_wanted.set()

    def recheck(self, instance_id: str) -> None:
        """Look at an instance again shortly: its event arrived while a worker held its
        request (the worker may have inspected the engine just before the event), or
        while its state moved."""
        now = time.monotonic()
        with self._rechecks_lock:
            _, until, gap = self._rechecks.get(instance_id, (0.0, now + RECHECK_FOR, 0.0))
            gap = min(RECHECK_AFTER, gap * 2) if gap else RECHECK_FIRST
            self._rechecks[instance_id] = (now + gap, until, gap)

    def _pause(self) -> float:
        """Until the next recheck is due, between 10 ms and 100 ms."""
        with self._rechecks_lock:
            due = min((at for at, _, _ in self._rechecks.values()), default=None)
        if due is None:
            return 0.1
        return max(0.01, min(0.1, due - time.monotonic()))

    def _run_rechecks(self) -> None:
        now = time.monotonic()
        with self._rechecks_lock:
            due = [i for i, (at, _, _) in self._rechecks.items() if at <= now]
        for instance_id in due:
            if self.stopping.is_set():
                return
            with self._rechecks_lock:
                _, until, gap = self._rechecks.pop(instance_id)
            try:
                outcome = instance_sync(
                    instance_id=instance_id, actor=MONITOR, data={"source": "recheck"}
                )
            except EngineError as exc:  # the reconcile will look again
                log.warning("recheck of instance %s: engine unreachable (%s)", instance_id, exc)
                continue
            if outcome in (Sync.BUSY, Sync.RACED) and now < until:
                gap = min(RECHECK_AFTER, gap * 2)
                with self._rechecks_lock:
                    due_again = self._rechecks.get(instance_id, (now + gap,))[0]
                    self._rechecks[instance_id] = (due_again, until, gap)

    def run(self) -> None:
        log.info("monitor %s started (installation %s)", os.getpid(), self.installation)
        if _config()["refresh_image_status_on_start"]:
            self._step(self._refresh_images)
        self.heartbeat.start()
        next_reconcile = next_beat = next_notice = 0.0
        next_policies = time.monotonic() + self.policy_interval
        while not self.stopping.is_set():
            if time.monotonic() >= next_beat:  # a live process for a dispatcher's start
                self._step(self._liveness_beat)
                next_beat = time.monotonic() + float(outbox_conf.value("poll_interval"))
            if self.reconcile_wanted.is_set() or time.monotonic() >= next_reconcile:
                self.reconcile_wanted.clear()
                self._step(self._follow_enabled)
                self._step(self._reconcile)
                next_reconcile = time.monotonic() + self.reconcile_interval
            if time.monotonic() >= next_notice:  # a "limit hit" webhook, once a period
                self._step(self._limit_notices)
                next_notice = time.monotonic() + LIMIT_NOTICE_EVERY
            if time.monotonic() >= next_policies:
                self._step(self._policies)
                next_policies = time.monotonic() + self.policy_interval
            if self._rechecks:
                self._step(self._run_rechecks)
            self._step(self._cursors_store)
            self.stopping.wait(self._pause())
        for follower in self.followers.values():
            if follower.inbox.settle(timeout=60):  # let the events in hand finish
                with follower.step:
                    follower.cursor_store()
                continue
            log.warning("runtime %s: event still being applied after 60s", follower.name)
        connection.close()
        log.info("monitor %s stopped", os.getpid())

    def _limit_notices(self) -> None:
        """Creates refused (a full queue, a quota) roll their transactions back and cannot
        enqueue a webhook: the refusal counter is read instead, once per period
        (``webhooks.services.webhook_limit_hits_notify``, which sends at most one)."""
        webhook_limit_hits_notify(counter=RequestStat.CREATE_REFUSED)

    def _step(self, action) -> None:
        close_old_connections()
        try:
            action()
        except Exception:  # noqa: BLE001 - one failed step never ends the monitor
            log.exception("monitor step %s failed; retrying later", action.__name__)

    def _cursors_store(self) -> None:
        """Store each follower's cursor that moved over a second ago and is still not
        stored (its stream went quiet since): the stored cursor is never much behind."""
        for follower in self.followers.values():
            if follower.step.acquire(blocking=False):  # never while its cursor moves
                try:
                    follower.cursor_store(every=CURSOR_STORE_EVERY)
                finally:
                    follower.step.release()

    def _liveness_beat(self) -> None:
        liveness.process_beat(name=self.beat_name, kind=liveness.MONITOR)

    def _refresh_images(self) -> None:
        template_images_refresh()

    def _follow_enabled(self) -> None:
        """Start a follower for each engine of the enabled runtimes not yet followed."""
        for runtime in distinct_engines(Runtime.objects.filter(enabled=True)):
            key = engine_key(runtime)
            follower = self.followers.get(key)
            if follower is not None and follower.thread.is_alive():
                continue
            self.followers[key] = Follower(self, runtime)
            self.followers[key].thread.start()

    def _policies(self) -> None:
        report = policies_pass()
        log.debug("policies: %s", report)

    def _reconcile(self) -> None:
        report = reconcile(installation=self.installation, actor=RECONCILER)
        log.debug("reconcile: %s", report)
