"""One engine event applied to its instance (``event_apply``: at least once, a replay
recognised), its look (``event_state_look``), a run of them in one transaction
(``event_run_apply``), and whether one that found its instance busy is looked at again
(``needs_recheck``)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from containers.actors import MONITOR
from containers.engines import engine_for
from containers.engines.base import EngineEvent
from containers.engines.labels import LABEL_INSTANCE
from containers.execution.event_batch import Seen, events_apply
from containers.execution.monitor.cursors import StreamSeen, cursor_advance, is_duplicate
from containers.execution.reconciler import engine_key
from containers.execution.sync import (
    Sync,
    clean_exit_apply,
    instance_read,
    instance_sync,
    running_as_recorded,
)
from containers.models import ContainerInstance, MonitorCursor, Runtime
from containers.states import ACTIVE_SLOTS

log = logging.getLogger(__name__)

# Events after which the container's state may differ from what the instance says.
# ``wait``: the engine waits for room of its own (a Pod waiting for a node); ``place``:
# that wait ended (the Pod was scheduled), so the reason clears and the timers change.
APPLIED_ACTIONS = frozenset({"start", "die", "oom", "pause", "unpause", "destroy", "wait", "place"})

# event_apply outcomes, besides instance_sync's
DUPLICATE = "duplicate"
IGNORED = "ignored"


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
