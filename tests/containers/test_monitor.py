"""The monitor (contract §5): event mapping, cursor and duplicates, reconnects.

The first part runs on the fake engine (no Docker): its ``events()`` replays a log from
the cursor and then ends, as a dropped stream does. The second part runs ``run_monitor``
with the real app processes on the real Docker Engine (see test_docker_lifecycle.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
import uuid

import pytest
from django.db.models import F, QuerySet
from django.db.models.sql.compiler import SQLCompiler

from containers.engines import engine_for
from containers.engines.base import ContainerSpec, ContainerState, EngineEvent
from containers.execution import monitor as monitor_module
from containers.execution.appliers import Appliers
from containers.execution.inbox import BATCH, Inbox
from containers.execution.monitor import (
    CURSOR_STORE_EVERY,
    DUPLICATE,
    IGNORED,
    RECHECK_FIRST,
    Follower,
    Monitor,
    StreamSeen,
    cursor_for,
    cursor_store,
    event_apply,
    is_duplicate,
    needs_recheck,
)
from containers.execution.monitor import events as monitor_events
from containers.execution.monitor import follower as monitor_follower
from containers.execution.sync import Sync, event_state_current
from containers.models import (
    ContainerEvent,
    ContainerInstance,
    MonitorCursor,
    OrphanContainer,
    Runtime,
)
from containers.queues import RequestKind
from containers.requests.services import container_start
from containers.states import Status
from outbox.models import OutboxEvent
from tests.containers.conftest import EXIT_ON_TERM, IMAGE
from tests.containers.test_docker_lifecycle import create, reaches, status, transitions
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory
from tests.processes import running_app, wait_for

pytestmark = pytest.mark.usefixtures("only_test_runtimes")


@pytest.fixture
def place(fake_runtime, template, engine):
    def make(status: str, engine_status: str = "running", **fields) -> ContainerInstance:
        instance = InstanceFactory(status=status, runtime=fake_runtime, template=template)
        runtime_id = engine.create(ContainerSpec(**{**instance.spec, "mounts": []}))
        if engine_status != "created":
            engine.set_state(runtime_id, engine_status, exit_code=fields.pop("exit_code", None))
        ContainerInstance.objects.filter(pk=instance.pk).update(container_id=runtime_id, **fields)
        return ContainerInstance.objects.get(pk=instance.pk)

    return make


def stored(instance) -> ContainerInstance:
    return ContainerInstance.objects.get(pk=instance.pk)


def history(instance) -> list[ContainerEvent]:
    return list(ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id"))


def apply(fake_runtime, event) -> str:
    return event_apply(runtime=fake_runtime, cursor=cursor_for(fake_runtime), event=event)


# -- event mapping ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_die_event_with_code_zero_stops_a_running_instance_and_is_recorded(
    place, engine, fake_runtime
):
    instance = place(Status.RUNNING)
    event = engine.set_state(instance.container_id, "exited", exit_code=0)
    assert apply(fake_runtime, event) == Sync.CHANGED
    row = stored(instance)
    assert (row.status, row.exit_code) == ("stopped", 0)
    [entry] = history(instance)
    assert (entry.from_status, entry.to_status, entry.actor, entry.kind) == (
        "running",
        "stopped",
        "monitor",
        "runtime",
    )
    assert entry.data["event"] == "die"
    assert entry.data["time_nano"] == event.time_nano


@pytest.mark.django_db
def test_a_die_event_with_a_non_zero_code_fails_the_instance_with_it(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    apply(fake_runtime, engine.set_state(instance.container_id, "exited", exit_code=3))
    row = stored(instance)
    assert (row.status, row.exit_code, row.status_reason) == ("failed", 3, "exited with code 3")


@pytest.mark.django_db
def test_an_oom_event_fails_the_instance_oomkilled(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    engine.set_state(instance.container_id, "exited", exit_code=137, oom_killed=True)
    oom, die = [e for e in engine.event_log() if e.action in ("oom", "die")]
    assert apply(fake_runtime, oom) == Sync.CHANGED
    assert apply(fake_runtime, die) == Sync.SKIPPED  # failed is terminal
    assert (stored(instance).status, stored(instance).status_reason) == ("failed", "OOMKilled")
    assert len(history(instance)) == 1


@pytest.mark.django_db
def test_pause_and_unpause_events(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    apply(fake_runtime, engine.set_state(instance.container_id, "paused"))
    assert stored(instance).status == "paused"
    apply(fake_runtime, engine.set_state(instance.container_id, "running"))
    assert stored(instance).status == "running"


@pytest.mark.django_db
def test_a_destroy_behind_our_back_fails_a_running_instance(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    engine.remove(instance.container_id)
    destroy = engine.event_log()[-1]
    assert destroy.action == "destroy"
    apply(fake_runtime, destroy)
    row = stored(instance)
    assert (row.status, row.status_reason, row.runtime_missing) == (
        "failed",
        "removed outside gobrave",
        True,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["deleting", "delete_pending"])
def test_a_destroy_while_deleting_is_our_own_delete(place, engine, fake_runtime, status):
    instance = place(status)
    engine.remove(instance.container_id)
    apply(fake_runtime, engine.event_log()[-1])
    assert stored(instance).status == status
    assert history(instance) == []


def _held(instance, kind: str = RequestKind.CREATE) -> OutboxEvent:
    """The instance's request of ``kind``, still held by its worker (``instance_sync``:
    BUSY)."""
    return RequestFactory(
        instance=instance, kind=kind, status="processing", available_at=instance.created_at
    )


@pytest.mark.django_db
def test_an_event_while_a_worker_holds_the_request_is_left_to_the_worker(
    place, engine, fake_runtime
):
    instance = place(Status.STOPPING)
    _held(instance, RequestKind.STOP)
    event = engine.set_state(instance.container_id, "exited", exit_code=137)
    assert apply(fake_runtime, event) == Sync.BUSY
    assert stored(instance).status == "stopping"
    assert cursor_for(fake_runtime).position == event.cursor  # the cursor moves on


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "kind", "action", "again"),
    [
        # The create's or start's own worker made the start call and inspects after it.
        (Status.CREATING, "ContainerCreateRequest", "start", False),
        (Status.STARTING, "ContainerStartRequest", "start", False),
        # Anything else that found its worker busy is looked at again.
        (Status.CREATING, "ContainerCreateRequest", "die", True),
        (Status.STOPPING, "ContainerStopRequest", "start", True),
    ],
)
def test_which_busy_events_are_looked_at_again(
    place, engine, fake_runtime, status, kind, action, again
):
    instance = place(status)
    _held(instance, kind)
    labels = {"io.gobrave.instance": str(instance.pk)}
    event = EngineEvent(action, instance.container_id, instance.container_name, labels, 7)
    outcome = apply(fake_runtime, event)
    assert outcome == Sync.BUSY, (outcome, stored(instance).status)
    assert needs_recheck(event, outcome) is again
    # An engine whose start returns before the container runs (Kubernetes: the Pod runs
    # when the kubelet starts it): the worker's inspect may precede the event's news.
    assert needs_recheck(event, outcome, start_runs=False)
    assert needs_recheck(event, Sync.RACED) and not needs_recheck(event, Sync.CHANGED)


@pytest.mark.django_db
def test_a_start_found_busy_is_not_looked_at_again_once_its_worker_moved_on(
    place, engine, fake_runtime
):
    """The look that found the create's worker busy read the instance ``creating``: the
    worker made that start call and looks itself, so its move to ``running`` meanwhile
    asks no second look (one read fewer, and no inspect) when the look's state is given;
    read afresh (no state given), the row says ``running`` and a recheck follows."""
    instance = place(Status.CREATING)
    _held(instance, "ContainerCreateRequest")
    labels = {"io.gobrave.instance": str(instance.pk)}
    event = EngineEvent("start", instance.container_id, instance.container_name, labels, 7)
    look = monitor_module.event_state_look(runtime=fake_runtime, event=event)
    assert (look.outcome, look.status) == (Sync.BUSY, Status.CREATING), look
    ContainerInstance.objects.filter(pk=instance.pk).update(status=Status.RUNNING)
    assert not needs_recheck(event, look.outcome, status=look.status)
    assert needs_recheck(event, look.outcome)  # read now: the row says running


@pytest.mark.django_db
def test_events_that_change_nothing_write_no_history(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    start = [e for e in engine.event_log() if e.action == "start"][-1]
    assert apply(fake_runtime, start) == Sync.UNCHANGED
    assert history(instance) == []


@pytest.mark.django_db
def test_a_start_of_the_container_a_running_instance_records_asks_the_engine_nothing(
    place, engine, fake_runtime
):
    """The worker that started it inspected after its start; a start event, even one
    read late, says nothing new. The container's later exit comes with its own event."""
    instance = place(Status.RUNNING, runtime_node_name="fake-node")
    start = [e for e in engine.event_log() if e.action == "start"][-1]
    die = engine.set_state(instance.container_id, "exited", exit_code=3)
    assert apply(fake_runtime, start) == Sync.UNCHANGED
    assert (stored(instance).status, history(instance)) == ("running", [])
    assert apply(fake_runtime, die) == Sync.CHANGED
    assert stored(instance).status == "failed", stored(instance).status_reason


@pytest.mark.django_db
def test_a_start_the_instance_does_not_record_as_running_takes_the_usual_look(
    place, engine, fake_runtime
):
    """A node name to backfill, or another container than the one recorded: the engine
    is asked, as for any event."""

    def start_of(instance, at: int) -> EngineEvent:
        labels = {"io.gobrave.instance": str(instance.pk)}
        return EngineEvent("start", instance.container_id, "n", labels, at)

    unnamed = place(Status.RUNNING, runtime_node_name="")
    engine.set_state(unnamed.container_id, "exited", exit_code=0)
    assert apply(fake_runtime, start_of(unnamed, 10)) == Sync.CHANGED
    assert stored(unnamed).status == "stopped"
    other = place(Status.RUNNING, runtime_node_name="fake-node")
    engine.set_state(other.container_id, "exited", exit_code=0)
    event = start_of(other, 20)
    ContainerInstance.objects.filter(pk=other.pk).update(container_id="another")
    assert apply(fake_runtime, event) == Sync.CHANGED, stored(other).status_reason


@pytest.mark.django_db
def test_a_cursor_is_stored_at_most_every_store_every_seconds_and_then_on_demand(fake_runtime):
    cursor = cursor_for(fake_runtime)
    event_apply(
        runtime=fake_runtime,
        cursor=cursor,
        event=EngineEvent("die", "a", "n", {}, 100),
        store_every=3600,
    )
    event_apply(
        runtime=fake_runtime,
        cursor=cursor,
        event=EngineEvent("die", "b", "n", {}, 200),
        store_every=3600,
    )
    assert cursor.position == "200"
    assert cursor_for(fake_runtime).position == "100"  # the first was stored, not the second
    cursor_store(cursor)
    assert (cursor_for(fake_runtime).position, cursor_for(fake_runtime).seen) == ("200", ["b/die"])


@pytest.mark.django_db(transaction=True)  # a session closes old connections
def test_a_session_stores_where_its_cursor_got_when_its_stream_ends(place, engine, fake_runtime):
    """Within a second only the first event's cursor is stored as it comes; the session's
    end stores the last."""
    instance = place(Status.RUNNING)
    follower = Follower(Monitor(), fake_runtime)
    follower.session(fake_runtime)  # first run: from now
    events = [
        engine.set_state(instance.container_id, state, exit_code=code)
        for state, code in (("paused", None), ("running", None), ("exited", 0))
    ]
    assert follower.session(fake_runtime) >= 3
    assert cursor_for(fake_runtime).position == events[-1].cursor, events


@pytest.mark.django_db(transaction=True)
def test_a_quiet_streams_cursor_is_stored_by_the_main_thread_within_a_second(fake_runtime):
    monitor = Monitor()
    follower = monitor.followers["fake"] = Follower(monitor, fake_runtime)
    follower.cursor = cursor_for(fake_runtime)
    event = EngineEvent("die", "a", "n", {}, 100)
    event_apply(runtime=fake_runtime, cursor=follower.cursor, event=event, store_every=3600)
    event = EngineEvent("die", "b", "n", {}, 200)
    event_apply(runtime=fake_runtime, cursor=follower.cursor, event=event, store_every=3600)
    assert cursor_for(fake_runtime).position == "100"
    with follower.step:  # a follower applying an event is never raced
        monitor._cursors_store()
        assert cursor_for(fake_runtime).position == "100"
    follower.cursor.stored_at -= CURSOR_STORE_EVERY  # its last store was a second ago
    monitor._cursors_store()
    assert cursor_for(fake_runtime).position == "200"


@pytest.mark.django_db
def test_an_event_of_a_container_with_no_instance_only_moves_the_cursor(engine, fake_runtime):
    event = EngineEvent("start", "abc", "gb-x", {"io.gobrave.instance": str(uuid.uuid4())}, 5)
    assert apply(fake_runtime, event) == IGNORED
    assert apply(fake_runtime, EngineEvent("start", "abc", "x", {}, 6)) == IGNORED
    assert cursor_for(fake_runtime).position == "6"


@pytest.mark.django_db(transaction=True)
def test_an_event_that_found_its_worker_busy_is_looked_at_again_once_it_is_done(
    place, engine, fake_runtime
):
    """The worker inspected just before the container died: the monitor catches up."""
    instance = place(Status.CREATING)
    row = _held(instance)
    event = engine.set_state(instance.container_id, "exited", exit_code=3)
    assert apply(fake_runtime, event) == Sync.BUSY
    monitor = Monitor()
    monitor.recheck(str(instance.pk))
    assert monitor._rechecks[str(instance.pk)][2] == RECHECK_FIRST  # looked at soon
    time.sleep(RECHECK_FIRST)
    monitor._run_rechecks()  # the worker still holds its request: later, less often
    assert stored(instance).status == Status.CREATING
    assert monitor._rechecks[str(instance.pk)][2] == 2 * RECHECK_FIRST
    # The worker applies what it saw before the exit, and finishes its request.
    ContainerInstance.objects.filter(pk=instance.pk).update(status=Status.RUNNING)
    OutboxEvent.objects.filter(pk=row.pk).update(status="sent")

    def caught_up():
        monitor._run_rechecks()
        return stored(instance).status == "failed"

    wait_for(caught_up, timeout=10, message="the recheck applied the exit")
    assert stored(instance).exit_code == 3
    assert not monitor._rechecks


# -- clean exits applied from the stream ---------------------------------------------------------


def _follow(fake_runtime, engine, seen, *, since: int = 0) -> list[str]:
    """Apply the engine's events from the ``since``-th on, as one session does."""
    cursor = cursor_for(fake_runtime)
    return [
        event_apply(runtime=fake_runtime, cursor=cursor, event=event, seen=seen)
        for event in engine.event_log()[since:]
    ]


def apply_seen(fake_runtime, event, seen) -> str:
    cursor = cursor_for(fake_runtime)
    return event_apply(runtime=fake_runtime, cursor=cursor, event=event, seen=seen)


def _describe(instance) -> str:
    row = stored(instance)
    return f"{row.status} exit {row.exit_code} ({row.status_reason}): " + "; ".join(
        f"{e.from_status}->{e.to_status} by {e.actor} {e.data.get('event', '')}"
        for e in history(instance)
    )


@pytest.mark.django_db
def test_a_clean_exit_seen_from_the_create_is_applied_while_the_worker_holds_the_request(
    place, engine, fake_runtime
):
    """A container created, started once and exited 0, all in one session: the exit is
    applied from the die event, without waiting for the create's worker."""
    instance = place(Status.CREATING, engine_status="created")
    _held(instance)
    engine.set_state(instance.container_id, "running")
    engine.set_state(instance.container_id, "exited", exit_code=0)
    outcomes = _follow(fake_runtime, engine, StreamSeen())
    assert outcomes[-1] == Sync.CHANGED, (outcomes, _describe(instance))
    row = stored(instance)
    assert (row.status, row.exit_code) == ("stopped", 0), _describe(instance)
    steps = [(e.from_status, e.to_status, e.actor, e.data["event"]) for e in history(instance)]
    assert steps == [("creating", "stopped", "monitor", "die")], _describe(instance)


@pytest.mark.django_db
def test_a_clean_exit_of_a_running_instance_seen_from_the_create_is_applied(
    place, engine, fake_runtime
):
    instance = place(Status.RUNNING, engine_status="created")
    engine.set_state(instance.container_id, "running")
    seen = StreamSeen()
    _follow(fake_runtime, engine, seen)  # create, start: the instance runs
    engine.set_state(instance.container_id, "exited", exit_code=0)
    assert _follow(fake_runtime, engine, seen, since=2) == [Sync.CHANGED], _describe(instance)
    assert (stored(instance).status, stored(instance).exit_code) == ("stopped", 0)


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["no create seen", "oom", "started twice", "other container"])
def test_an_exit_the_stream_cannot_vouch_for_is_left_to_the_worker(
    place, engine, fake_runtime, case
):
    """Only a whole life seen in the session counts: else the usual look (BUSY here)."""
    instance = place(Status.CREATING, engine_status="created")
    _held(instance)
    since = len(engine.event_log()) if case == "no create seen" else 0
    engine.set_state(instance.container_id, "running")
    if case == "started twice":
        engine.set_state(instance.container_id, "exited", exit_code=3)
        engine.set_state(instance.container_id, "running")
    if case == "other container":
        ContainerInstance.objects.filter(pk=instance.pk).update(container_id="another")
    engine.set_state(instance.container_id, "exited", exit_code=0, oom_killed=case == "oom")
    outcomes = _follow(fake_runtime, engine, StreamSeen(), since=since)
    assert outcomes[-1] == Sync.BUSY, (outcomes, _describe(instance))
    assert stored(instance).status == Status.CREATING, _describe(instance)


@pytest.mark.django_db
def test_a_clean_exit_of_an_instance_started_again_takes_the_usual_look(
    place, engine, fake_runtime
):
    """A running instance that was asked to start again (its earlier run stopped): the
    die may be that earlier run's, so the engine is inspected (it says running)."""
    instance = place(Status.RUNNING, engine_status="created")
    engine.set_state(instance.container_id, "running")
    engine.set_state(instance.container_id, "exited", exit_code=0)
    ContainerEvent.objects.create(
        instance_id=instance.pk, instance_name=instance.name, kind="ContainerStartRequest",
        actor="user:alice",
    )  # fmt: skip
    engine.set_state(instance.container_id, "running")  # the engine runs it again, unseen
    seen = StreamSeen()
    for event in engine.event_log()[:3]:  # create, start, die: the session saw only these
        seen.note(event)
    die = engine.event_log()[2]
    assert die.action == "die"
    assert apply_seen(fake_runtime, die, seen) == Sync.UNCHANGED  # inspected: running
    assert stored(instance).status == Status.RUNNING, _describe(instance)


def test_stream_seen_forgets_destroyed_and_oldest_containers():
    seen = StreamSeen()
    seen.MAX = 2
    for n, runtime_id in enumerate("abc"):
        seen.note(EngineEvent("create", runtime_id, "gb-x", {}, n))
        seen.note(EngineEvent("start", runtime_id, "gb-x", {}, n))
    seen.note(EngineEvent("destroy", "c", "gb-x", {}, 9))
    for runtime_id, clean in (("a", False), ("b", True), ("c", False)):
        die = EngineEvent("die", runtime_id, "gb-x", {}, 10, exit_code=0)
        assert seen.clean_exit(die) is clean, runtime_id
    assert not seen.clean_exit(EngineEvent("die", "b", "gb-x", {}, 10, exit_code=3))


# -- cursor and duplicates ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_replayed_event_is_a_duplicate_and_changes_nothing(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    event = engine.set_state(instance.container_id, "exited", exit_code=0)
    assert apply(fake_runtime, event) == Sync.CHANGED
    assert apply(fake_runtime, event) == DUPLICATE
    assert len(history(instance)) == 1


def test_duplicates_are_the_events_seen_at_the_cursors_exact_position():
    cursor = MonitorCursor(position="100", seen=["a/die"])
    assert is_duplicate(cursor, EngineEvent("die", "a", "n", {}, 100))
    assert is_duplicate(cursor, EngineEvent("die", "a", "n", {}, 7, cursor="100"))  # opaque
    assert not is_duplicate(cursor, EngineEvent("destroy", "a", "n", {}, 100))
    assert not is_duplicate(cursor, EngineEvent("die", "b", "n", {}, 100))
    assert not is_duplicate(cursor, EngineEvent("die", "a", "n", {}, 101))


@pytest.mark.django_db
def test_the_cursor_keeps_every_key_seen_at_its_position(fake_runtime):
    apply(fake_runtime, EngineEvent("die", "a", "n", {}, 100))
    apply(fake_runtime, EngineEvent("die", "b", "n", {}, 100))
    cursor = cursor_for(fake_runtime)
    assert (cursor.position, cursor.seen) == ("100", ["a/die", "b/die"])
    apply(fake_runtime, EngineEvent("die", "a", "n", {}, 100))  # a replay: ignored
    assert cursor_for(fake_runtime).seen == ["a/die", "b/die"]


@pytest.mark.django_db(transaction=True)  # a session closes old connections
def test_a_session_resumes_from_the_cursor_and_drops_what_it_replays(place, engine, fake_runtime):
    instance = place(Status.RUNNING)
    follower = Follower(Monitor(), fake_runtime)
    follower.session(fake_runtime)  # first run: from now (this second's events are old)
    assert cursor_for(fake_runtime).position  # a cursor from now
    assert history(instance) == []
    # While no monitor runs, the container exits; the next session replays it.
    die = engine.set_state(instance.container_id, "exited", exit_code=0)
    assert follower.session(fake_runtime) >= 1
    assert stored(instance).status == "stopped"
    assert history(instance)[-1].data["event"] == "die"
    assert cursor_for(fake_runtime).position == die.cursor
    # The same second is replayed again (inclusive since): nothing new is recorded.
    follower.session(fake_runtime)
    assert len(history(instance)) == 1


# -- reconnects ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_engine_is_retried_with_a_clear_message(engine, fake_runtime, caplog):
    (engine.root / "fail-events").write_text("3")
    monitor = Monitor(backoff_cap=0.05)
    follower = Follower(monitor, fake_runtime)
    with caplog.at_level(logging.WARNING, logger="containers.execution.monitor"):
        follower.thread.start()
        wait_for(lambda: len(engine.calls("events")) >= 5, timeout=10, message="5 connects")
        monitor.stop()
        follower.thread.join(timeout=5)
    assert not follower.thread.is_alive()
    messages = [r.getMessage() for r in caplog.records]
    assert any("engine unreachable (injected events failure" in m for m in messages)
    assert any("event stream dropped; reconnecting in" in m for m in messages)
    assert monitor.reconcile_wanted.is_set()  # every connect asks for a full reconcile


@pytest.mark.django_db(transaction=True)
def test_a_follower_records_its_engine_unreachable_and_back_without_a_reconcile(
    engine, fake_runtime
):
    """Only the follower runs (no reconcile pass ever): a stream that cannot reopen and
    a ping that fails mark the engine away; the next stream that opens marks it back."""

    def health() -> tuple:
        return Runtime.objects.values_list("health", "health_since", "last_error").get(
            pk=fake_runtime.pk
        )

    monitor = Monitor(backoff_cap=0.05)
    follower = Follower(monitor, fake_runtime)
    follower.thread.start()
    try:
        wait_for(lambda: health()[0] == "reachable", timeout=10, message="reachable",
                 describe=lambda: str(health()))  # fmt: skip
        (engine.root / "fail-events").write_text("100000")
        (engine.root / "down").write_text("")
        wait_for(lambda: health()[0] == "unreachable", timeout=10, message="unreachable",
                 describe=lambda: str(health()))  # fmt: skip
        _, since, error = health()
        assert since is not None and "did not answer" in error, health()
        (engine.root / "fail-events").unlink()
        (engine.root / "down").unlink()
        wait_for(lambda: health()[0] == "reachable", timeout=10, message="reachable again",
                 describe=lambda: str(health()))  # fmt: skip
        assert health()[2] == "", health()
    finally:
        monitor.stop()
        follower.thread.join(timeout=5)


@pytest.mark.django_db(transaction=True)
def test_a_follower_stops_when_its_runtime_is_disabled(engine, fake_runtime):
    monitor = Monitor(backoff_cap=0.05)
    follower = Follower(monitor, fake_runtime)
    follower.thread.start()
    wait_for(lambda: engine.calls("events"), timeout=10, message="a connect")
    Runtime.objects.filter(pk=fake_runtime.pk).update(enabled=False)
    follower.thread.join(timeout=5)
    assert not follower.thread.is_alive()
    monitor.stop()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_run_monitor_without_an_engine_keeps_retrying_and_exits_zero_on_sigterm(postgres, tmp_path):
    Runtime.objects.all().delete()
    RuntimeFactory(name="gone", driver="docker", base_url="unix:///tmp/gobrave-no-engine.sock")
    with running_app(tmp_path, container_reconcile_interval=1) as app:
        app.monitor()
        log = app.logdir / "monitor.log"

        def retried() -> bool:
            text = log.read_text() if log.exists() else ""
            return text.count("runtime gone: engine unreachable") >= 2

        wait_for(retried, timeout=30, message="two reconnect attempts")
        text = log.read_text()
        assert "reconnecting in 1s" in text and "reconnecting in 2s" in text
        assert "reconcile: runtime gone (unix:///tmp/gobrave-no-engine.sock) unreachable" in text
        assert app.processes["monitor"].poll() is None  # still alive
        assert app.stop("monitor", timeout=15) == 0
    assert "Traceback" not in log.read_text()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_run_monitor_exits_zero_on_sigterm_while_following(postgres, tmp_path, fake_runtime):
    """SIGTERM between reconnects: the process finishes its step and exits 0."""
    with running_app(tmp_path) as app:
        process = app.monitor()
        app.wait_logged("monitor", "following runtime", timeout=30, message="monitor following")
        time.sleep(0.5)
        assert app.stop("monitor", timeout=15) == 0
        assert process.returncode == 0


# -- on the real engine ---------------------------------------------------------------------------

docker_tests = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _docker(test):
    for mark in reversed(docker_tests):
        test = mark(test)
    return test


# No periodic reconcile in these: the events alone must do it.
EVENTS_ONLY = {"container_reconcile_interval": "600"}


def _an_orphan(dock) -> QuerySet[OrphanContainer]:
    """A container with our labels and no instance, made before the monitor starts. The
    monitor reconciles at its start and once its stream is open (then not for
    ``EVENTS_ONLY``'s 600 s); each pass sees it, so its orphan row refreshed after it
    was made says both are done (``_reconciles_done``). Returns the row's queryset."""
    label = str(uuid.uuid4())
    dock.client.create_container(
        IMAGE,
        command=["sleep", "1000"],
        name=f"gb-{label}",
        labels={"io.gobrave.installation": dock.installation, "io.gobrave.instance": label},
    )
    return OrphanContainer.objects.filter(name=f"gb-{label}")


def _reconciles_done(orphan: QuerySet[OrphanContainer]) -> None:
    """Wait until the monitor's two reconciles have seen ``_an_orphan`` (the orphans
    are the last step of a pass: the instances were compared before)."""
    wait_for(
        lambda: orphan.filter(last_seen_at__gt=F("first_seen_at")).exists(),
        timeout=30,
        message="the monitor's two reconciles",
        describe=lambda: f"orphan rows: {list(orphan.values())}",
    )


@_docker
def test_docker_pause_and_unpause_are_followed_and_start_unpauses(dock, owner):
    """The monitor's stream, not a reconcile, follows the pause: the container is paused
    once both of the monitor's reconciles are done (the stream is open by then)."""
    orphan = _an_orphan(dock)
    instance = create(dock.template(["sleep", "1000"]), owner)
    with dock.pipeline(**EVENTS_ONLY):
        row = reaches(instance, "running")
        _reconciles_done(orphan)
        _pause_unpause_and_start(dock, instance, row)


def _pause_unpause_and_start(dock, instance, row) -> None:
    dock.client.pause(row.container_id)
    reaches(instance, "paused", timeout=10)
    dock.client.unpause(row.container_id)
    reaches(instance, "running", timeout=10)
    paused = ContainerEvent.objects.filter(instance_id=instance.pk, to_status="paused").get()
    # Seen by the monitor: from the pause event, or from its recheck of the start event
    # that had found the create's worker still busy (it may look first).
    said = f"{paused.actor}: {paused.message} {paused.data}"
    assert paused.actor == "monitor", said
    assert paused.data.get("event") == "pause" or paused.data == {"source": "recheck"}, said
    # A start request on a paused instance unpauses its container.
    dock.client.pause(row.container_id)
    reaches(instance, "paused", timeout=10)
    container_start(instance_id=instance.pk, actor="test")
    reaches(instance, "running")
    assert dock.engine_state(instance)["Status"] == "running"
    assert transitions(instance)[-3:] == [
        ("paused", "start_pending"),
        ("start_pending", "starting"),
        ("starting", "running"),
    ]


@_docker
def test_docker_rm_f_behind_our_back_fails_a_running_instance(dock, owner):
    """The monitor's event, not a reconcile, fails the instance: the container is
    removed once both of the monitor's reconciles are done (``_an_orphan``)."""
    orphan = _an_orphan(dock)
    instance = create(dock.template(["sleep", "1000"]), owner)
    with dock.pipeline(**EVENTS_ONLY):
        row = reaches(instance, "running")
        _reconciles_done(orphan)
        dock.client.remove_container(row.container_id, force=True)
        row = reaches(instance, "failed", timeout=10)
    assert (row.status_reason, row.runtime_missing) == ("removed outside gobrave", True)
    [entry] = ContainerEvent.objects.filter(instance_id=instance.pk, to_status="failed")
    assert entry.actor == "monitor"


@_docker
def test_an_exit_while_the_monitor_is_down_is_applied_after_it_restarts(dock, pipeline, owner):
    instance = create(dock.template(EXIT_ON_TERM), owner)
    row = reaches(instance, "running")
    wait_for(lambda: MonitorCursor.objects.exclude(position="").exists(), timeout=10)
    assert pipeline.stop("monitor", timeout=15) == 0
    before_exit = time.time_ns()
    dock.client.kill(row.container_id, signal="SIGTERM")  # exits 0 on its own
    wait_for(lambda: dock.engine_state(instance)["Status"] == "exited", timeout=10)
    time.sleep(0.5)
    assert status(instance) == "running"  # nobody saw it
    pipeline.monitor("monitor-2")
    row = reaches(instance, "stopped", timeout=15)
    assert row.exit_code == 0

    # The stream resumed past the missed events (the reconcile after the reconnect may
    # have applied the exit first; the follower stores the cursor when it applies it).
    def resumed_past() -> bool:
        return int(MonitorCursor.objects.get(runtime=dock.runtime).position) > before_exit

    wait_for(
        resumed_past,
        timeout=10,
        describe=lambda: str(MonitorCursor.objects.get(runtime=dock.runtime)),
    )


@_docker
def test_the_reconciler_repairs_a_state_changed_while_no_monitor_ran(dock, owner):
    instance = create(dock.template(EXIT_ON_TERM), owner)
    with dock.app() as app:
        app.dispatcher()
        app.cluster("create")
        row = reaches(instance, "running")
        dock.client.kill(row.container_id, signal="SIGTERM")
        wait_for(lambda: dock.engine_state(instance)["Status"] == "exited", timeout=10)
        assert status(instance) == "running"
        result = app.manage("reconcile", "--once")
    assert result.returncode == 0, result.stderr
    assert "changed 1" in result.stdout
    [entry] = ContainerEvent.objects.filter(instance_id=instance.pk, to_status="stopped")
    assert (entry.from_status, entry.actor) == ("running", "reconciler")
    assert status(instance) == "stopped"


@_docker
def test_an_orphan_container_is_reported_then_removed_under_policy_remove(dock, owner):
    label = str(uuid.uuid4())
    made = dock.client.create_container(
        "gobrave-test-busybox:latest",
        command=["sleep", "1000"],
        name=f"gb-{label}",
        labels={
            "io.gobrave.installation": dock.installation,
            "io.gobrave.instance": label,
            "io.gobrave.template": "gone",
        },
    )
    with dock.app() as app:
        reported = app.manage("reconcile", "--once")
        assert reported.returncode == 0, reported.stderr
        orphan = OrphanContainer.objects.get()
        assert (orphan.container_id, orphan.name, orphan.removed_at) == (
            made["Id"],
            f"gb-{label}",
            None,
        )
        [event] = ContainerEvent.objects.filter(kind="orphan")
        assert str(event.instance_id) == label
        assert dock.containers() != []  # report only
        removed = app.manage("reconcile", "--once", GOBRAVE_CONTAINER_ORPHAN_POLICY="remove")
        assert removed.returncode == 0, removed.stderr
    assert dock.containers() == []
    orphan.refresh_from_db()
    assert orphan.removed_at is not None
    assert ContainerEvent.objects.filter(kind="orphan").count() == 1  # reported once


@_docker
def test_refresh_images_marks_present_and_missing(dock):
    here = dock.template(["true"])
    gone = dock.template(["true"], image="gobrave-no-such-image:never")
    with dock.app() as app:
        result = app.manage("refresh_images")
    assert result.returncode == 0, result.stderr
    here.refresh_from_db()
    gone.refresh_from_db()
    assert (here.image_status, gone.image_status) == ("present", "missing")


@pytest.mark.django_db
def test_a_clean_exit_before_the_running_was_recorded_takes_the_usual_look(
    place, engine, fake_runtime
):
    """A ``running`` recorded after the die (a create retry that adopted the exited
    container and started it again, unseen by a lagging monitor): that die may be the
    earlier run's, so the engine is inspected (it says running) and nothing moves."""
    instance = place(Status.RUNNING, engine_status="created")
    engine.set_state(instance.container_id, "running")
    engine.set_state(instance.container_id, "exited", exit_code=0)
    seen = StreamSeen()
    for event in engine.event_log()[:3]:  # create, start, die
        seen.note(event)
    die = engine.event_log()[2]
    assert die.action == "die"
    engine.set_state(instance.container_id, "running")  # run 2, its start not yet seen
    later = dt.datetime.fromtimestamp(die.time_nano / 1e9, tz=dt.UTC) + dt.timedelta(seconds=1)
    ContainerInstance.objects.filter(pk=instance.pk).update(status_changed_at=later)
    assert apply_seen(fake_runtime, die, seen) == Sync.UNCHANGED, _describe(instance)
    assert stored(instance).status == Status.RUNNING, _describe(instance)


@_docker
def test_the_engine_s_own_die_of_a_clean_exit_is_applied_without_an_inspect(
    dock, owner, monkeypatch
):
    """On the real engine: its ``create``, ``start`` and ``die`` events (their container
    id and exit code as Docker writes them) let a session vouch for the exit, and it is
    applied while the create's request is still unfinished, with no look at the engine
    (an inspect here would fail the test)."""
    from containers.execution.handlers import _spec

    instance = create(dock.template(["true"]), owner)
    ContainerInstance.objects.filter(pk=instance.pk).update(status=Status.CREATING)
    engine = engine_for(dock.runtime)
    since = time.time_ns()
    runtime_id = engine.create(_spec(stored(instance)))
    ContainerInstance.objects.filter(pk=instance.pk).update(container_id=runtime_id)
    engine.start(runtime_id)
    wait_for(
        lambda: dock.engine_state(instance)["Status"] == "exited",
        timeout=30,
        message="the container exited",
        describe=lambda: str(dock.engine_state(instance)),
    )
    events = list(engine.events(dock.installation, since, until_nano=time.time_ns() + 10**9))

    def no_look(self, ref):
        raise AssertionError(f"inspected {ref} on the engine")

    monkeypatch.setattr(type(engine), "inspect", no_look)
    seen, cursor = StreamSeen(), cursor_for(dock.runtime)
    outcomes = [
        event_apply(runtime=dock.runtime, cursor=cursor, event=event, seen=seen) for event in events
    ]
    actions = [event.action for event in events]
    assert actions[:1] == ["create"] and actions[-1] == "die", actions
    assert outcomes[-1] == Sync.CHANGED, (actions, outcomes, _describe(instance))
    row = stored(instance)
    assert (row.status, row.exit_code) == ("stopped", 0), _describe(instance)
    assert OutboxEvent.objects.filter(aggregate_id=str(instance.pk), status="pending").exists()


# -- appliers -----------------------------------------------------------------------------------


def test_appliers_keep_each_engine_s_order_and_a_busy_engine_does_not_starve_another():
    """One applier, two engines: 200 events of A wait, then one of B; B's is applied
    after A's first batch, not after all of A's, and each engine's come in its order."""
    monitor = Monitor(installation="test", appliers=1)
    busy, quiet = (Follower(monitor, Runtime(pk=n, name=n)) for n in ("busy", "quiet"))
    applied: list[tuple[str, int]] = []
    quiet_delivered = threading.Event()

    def recorder(follower):
        def apply(event, clean=False, read=None):
            if not applied:  # hold the applier in A's first batch until B's event waits
                assert quiet_delivered.wait(10)
            applied.append((follower.name, event.time_nano))

        return apply

    busy.apply, quiet.apply = recorder(busy), recorder(quiet)
    for n in range(200):
        busy.deliver(EngineEvent("die", "a", "n", {}, n))
    quiet.deliver(EngineEvent("die", "b", "n", {}, 0))
    quiet_delivered.set()
    busy.drained()
    quiet.drained()
    monitor.stop()

    assert applied.index(("quiet", 0)) == BATCH, applied[: BATCH + 2]
    assert [n for name, n in applied if name == "busy"] == list(range(200))
    assert monitor.appliers.threads <= 1


def test_an_event_that_fails_to_apply_asks_for_a_reconcile_and_the_next_ones_still_go(caplog):
    monitor = Monitor(installation="test", appliers=1)
    follower = Follower(monitor, Runtime(pk=1, name="one"))
    applied = []

    def apply(event, clean=False, read=None):
        if event.time_nano == 0:
            raise RuntimeError("the database went away")
        applied.append(event.time_nano)

    follower.apply = apply
    with caplog.at_level(logging.ERROR, logger="containers.execution.monitor"):
        for n in range(3):
            follower.deliver(EngineEvent("die", "a", "n", {}, n))
        follower.drained()
    monitor.stop()

    assert applied == [1, 2]
    assert monitor.reconcile_wanted.is_set()
    assert "runtime one: event die not applied" in caplog.text


class _HeldBeforeTaking(queue.SimpleQueue):
    """The appliers' line, whose ``get`` holds every applier between counting itself idle
    and taking a batch until ``opened``: the window in which a batch scheduled meanwhile
    must still get a thread of its own (``entered``: an applier is in it)."""

    def __init__(self) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()

    def get(self, *args, **kwargs):
        self.entered.set()
        assert self.opened.wait(10), "the test never opened the line"
        return super().get(*args, **kwargs)


def test_one_engines_events_are_applied_in_parallel_across_instances_in_order_for_each():
    """Two appliers, two instances in different shards: while A's first event is held,
    B's are applied; A's come in their order; the watermark (where the cursor may move)
    stays before A's first until it is applied, then reaches the last event. B's shard
    is scheduled while the first applier, counted idle, has not yet taken A's: it still
    gets a second applier."""
    stopping = threading.Event()
    appliers = Appliers(2, stopping)
    appliers._ready = line = _HeldBeforeTaking()
    keys = [f"instance-{n}" for n in range(64)]
    a = keys[0]
    b = next(k for k in keys if hash(k) % 2 != hash(a) % 2)
    applied, reached = [], []
    b_done, a_released = threading.Event(), threading.Event()

    def apply(items):
        for event, _ in items:
            if event.name == "a1":
                assert b_done.wait(10), f"B's events waited behind A's: {applied}"
                a_released.wait(10)
            applied.append(event.name)
            if event.name == "b2":
                b_done.set()

    inbox = Inbox(
        shards=2,
        limit=100,
        schedule=appliers.schedule,
        stopping=stopping,
        apply=apply,
        reached=lambda seq, mark: reached.append(mark),
    )
    inbox.put(EngineEvent("die", "a1", "a1", {}, 1), key=a, clean=False, mark="a1")
    assert line.entered.wait(10), "no applier started for A's shard"
    for key, name in ((b, "b1"), (b, "b2"), (a, "a2")):
        inbox.put(EngineEvent("die", name, name, {}, 1), key=key, clean=False, mark=name)
    line.opened.set()
    assert b_done.wait(10), (applied, appliers.threads)
    assert applied == ["b1", "b2"] and reached == [], (applied, reached)
    a_released.set()
    inbox.drained()
    stopping.set()
    assert applied == ["b1", "b2", "a1", "a2"], applied
    assert reached[-1] == "a2" and len(inbox) == 0, reached


@pytest.mark.django_db
def test_an_events_own_state_of_the_current_run_is_applied_without_asking_the_engine(
    place, engine, fake_runtime
):
    """The fake engine still says running; an exit the event carries, ended after the
    instance became running, is applied as it says: the engine was not asked."""
    instance = place(Status.RUNNING, runtime_node_name="fake-node")
    ended = instance.status_changed_at + dt.timedelta(seconds=1)
    state = ContainerState(
        instance.container_id, instance.container_name, "exited", exit_code=3, finished_at=ended
    )
    labels = {"io.gobrave.instance": str(instance.pk)}
    event = EngineEvent("die", instance.container_id, instance.container_name, labels, 7, 3,
                        state=state)  # fmt: skip
    assert apply(fake_runtime, event) == Sync.CHANGED
    row = stored(instance)
    assert (row.status, row.exit_code) == (Status.FAILED, 3), (row.status, row.status_reason)


def _exit_of_an_earlier_run(instance) -> EngineEvent:
    """A ``die`` whose state ended (exit 3) before the instance entered its state: a
    replay of the run before a restart, after a monitor restart."""
    ended = instance.status_changed_at - dt.timedelta(seconds=5)
    state = ContainerState(
        instance.container_id, instance.container_name, "exited", exit_code=3, finished_at=ended
    )
    labels = {"io.gobrave.instance": str(instance.pk)}
    return EngineEvent("die", instance.container_id, instance.container_name, labels, 7, 3,
                       state=state)  # fmt: skip


@pytest.mark.django_db
def test_an_events_state_that_may_be_an_earlier_runs_is_checked_with_the_engine(
    place, engine, fake_runtime
):
    """An exit that ended before the instance became running (a replay of the run before
    a restart, after a monitor restart) is not applied: the engine is asked, and says
    running, so nothing changes."""
    instance = place(Status.RUNNING, runtime_node_name="fake-node")
    event = _exit_of_an_earlier_run(instance)
    assert apply(fake_runtime, event) == Sync.UNCHANGED
    assert stored(instance).status == Status.RUNNING, stored(instance).status_reason


@pytest.mark.parametrize(
    ("status", "engine_status", "offset", "current"),
    [
        (Status.CREATING, "running", None, True),  # no run before: its name is its own
        (Status.CREATING, "rejected", None, True),
        (Status.CREATING, "created", None, True),
        (Status.CREATING, "unknown", None, False),  # no word from its node: ask
        (Status.STARTING, "running", 1, True),
        (Status.STARTING, "running", -1, False),  # began before this start: an earlier run
        (Status.STARTING, "created", None, False),  # no time to tell which run
        (Status.RUNNING, "exited", 0, True),
        (Status.RUNNING, "exited", -1, False),
        (Status.RUNNING, "exited", None, False),  # no end time
        (Status.STOPPED, "running", -1, False),
        (Status.RUNNING, "removing", 1, False),
    ],
)
def test_which_event_states_count_as_the_current_runs(status, engine_status, offset, current):
    changed = dt.datetime(2026, 12, 4, 12, 0, 0, 500000, tzinfo=dt.UTC)
    at = None if offset is None else changed.replace(microsecond=0) + dt.timedelta(seconds=offset)
    if offset == 0:
        at = changed  # the same instant
    times = {"started_at": at} if engine_status == "running" else {"finished_at": at}
    instance = ContainerInstance(status=status, status_changed_at=changed, container_id="gb-1")
    state = ContainerState("gb-1", "gb-1", engine_status, **times)
    assert event_state_current(instance, state) is current
    other = ContainerState("gb-2", "gb-2", engine_status, **times)
    assert not event_state_current(instance, other)  # not the container it records


@pytest.mark.django_db(transaction=True)
def test_a_shards_events_that_say_enough_are_applied_together_and_the_rest_one_by_one(
    place, engine, fake_runtime
):
    """One shard's turn: two clean exits, an exit the event carries, a start the event
    carries while the create's worker is still at work, and an exit that may be an
    earlier run's. The first four are applied in one transaction (a running container
    of a creating instance is applied ahead of its worker); the last is checked with
    the engine (which says running: unchanged)."""
    monitor = Monitor(installation="test", appliers=1)
    follower = Follower(monitor, fake_runtime)
    clean = [place(Status.RUNNING, runtime_node_name="fake-node") for _ in range(2)]
    failing = place(Status.RUNNING, runtime_node_name="fake-node")
    creating = place(Status.CREATING)  # no node name yet: the event's is backfilled
    _held(creating)
    stale = place(Status.RUNNING, runtime_node_name="fake-node")

    def event(instance, action, state=None, code=None):
        labels = {"io.gobrave.instance": str(instance.pk)}
        return EngineEvent(action, instance.container_id, instance.container_name, labels,
                           time.time_ns(), code, state=state)  # fmt: skip

    def exited(instance, code, seconds):
        return ContainerState(
            instance.container_id, instance.container_name, "exited", exit_code=code,
            finished_at=instance.status_changed_at + dt.timedelta(seconds=seconds),
        )  # fmt: skip

    running = ContainerState(creating.container_id, creating.container_name, "running",
                             node_name="fake-node")  # fmt: skip
    items = [
        (event(clean[0], "die", code=0), True),
        (event(clean[1], "die", code=0), True),
        (event(failing, "die", exited(failing, 3, 1), 3), False),
        (event(creating, "start", running), False),
        (event(stale, "die", exited(stale, 3, -5), 3), False),
    ]
    together = []
    real = monitor_follower.event_run_apply

    def spy(**kwargs):
        together.append([e.name for e, _ in kwargs["run"]])
        return real(**kwargs)

    monitor_follower.event_run_apply = spy  # where ``Follower`` looks it up
    try:
        follower.apply_many(items)
    finally:
        monitor_follower.event_run_apply = real
    names = [e.name for e, _ in items]
    assert together == [names], together
    rows = {i.pk: stored(i) for i in (*clean, failing, creating, stale)}
    assert [(rows[i.pk].status, rows[i.pk].exit_code) for i in clean] == [("stopped", 0)] * 2
    assert (rows[failing.pk].status, rows[failing.pk].exit_code) == ("failed", 3)
    assert rows[creating.pk].status == "running"  # the worker's own look changes nothing
    assert rows[creating.pk].runtime_node_name == "fake-node"
    assert [e.to_status for e in history(failing)] == ["failed"], history(failing)
    assert rows[stale.pk].status == "running", rows[stale.pk].status_reason


@pytest.mark.django_db(transaction=True)
def test_a_lone_running_pod_of_a_creating_instance_is_applied_in_four_statements_and_a_commit(
    place, fake_runtime, django_assert_num_queries
):
    """A shard's turn of one event (each create on a quiet Kubernetes runtime: the Pod's
    ``start``, carrying its state) takes the batch's path: the row locked (no read
    before it), no ask of the outbox (the state runs ahead of the create's worker,
    ``runs_ahead_of_worker``), then the node name, the move with its history entry and
    the release of the slot, sent together: four statements in one transaction (a look
    of its own took five, each waiting for its answer)."""
    follower = Follower(Monitor(installation="test", appliers=1), fake_runtime)
    creating = place(Status.CREATING)  # no node name yet: the Pod's is backfilled
    _held(creating)
    running = ContainerState(creating.container_id, creating.container_name, "running",
                             node_name="node-1")  # fmt: skip
    labels = {"io.gobrave.instance": str(creating.pk)}
    event = EngineEvent("start", creating.container_id, creating.container_name, labels,
                        time.time_ns(), state=running)  # fmt: skip
    with django_assert_num_queries(6):  # BEGIN, the four, COMMIT
        follower.apply_many([(event, False)])
    row = stored(creating)
    assert (row.status, row.runtime_node_name) == (Status.RUNNING, "node-1")
    assert [(e.from_status, e.to_status) for e in history(creating)] == [("creating", "running")]


@pytest.mark.django_db(transaction=True)
def test_a_lone_running_pod_compiles_no_query(place, fake_runtime, monkeypatch):
    """Every statement of a lone event's apply is compiled once per process (the
    lifecycle's prepared lock, not a queryset compiled per event): the second
    instance's compiles nothing."""
    follower = Follower(Monitor(installation="test", appliers=1), fake_runtime)
    compiled = []
    real = SQLCompiler.as_sql
    for n in range(2):
        creating = place(Status.CREATING)
        _held(creating)
        running = ContainerState(creating.container_id, creating.container_name, "running",
                                 node_name="node-1")  # fmt: skip
        labels = {"io.gobrave.instance": str(creating.pk)}
        event = EngineEvent("start", creating.container_id, creating.container_name, labels,
                            time.time_ns(), state=running)  # fmt: skip
        if n == 1:
            monkeypatch.setattr(SQLCompiler, "as_sql", lambda self, *a, **k: compiled.append(
                self.query.model) or real(self, *a, **k))  # fmt: skip
        follower.apply_many([(event, False)])
        monkeypatch.undo()
        assert stored(creating).status == Status.RUNNING
    assert compiled == [], compiled


@pytest.mark.django_db(transaction=True)
def test_a_lone_event_the_batch_cannot_settle_is_looked_at_from_the_row_it_read(
    place, engine, fake_runtime
):
    """An exit the event carries that may be an earlier run's (ended before the
    instance's state began) is left by the batch's transaction to the usual look, which
    asks the engine (it says running: unchanged) and does not read the row again."""
    follower = Follower(Monitor(installation="test", appliers=1), fake_runtime)
    instance = place(Status.RUNNING, runtime_node_name="fake-node")
    event = _exit_of_an_earlier_run(instance)
    reads = []
    real = monitor_events.instance_read
    # where ``event_state_look`` looks it up
    monitor_events.instance_read = lambda *a, **k: reads.append(a) or real(*a, **k)
    try:
        follower.apply_many([(event, False)])
    finally:
        monitor_events.instance_read = real
    assert reads == []
    row = stored(instance)
    assert (row.status, history(instance)) == (Status.RUNNING, []), row.status_reason
