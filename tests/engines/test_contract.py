"""The engine contract: what every driver must do, one suite for all (docs/kubernetes.md,
"What differs from Docker").

The same test functions run over each driver (``driver`` is the parameter): ``docker``
(the real engine and the locally built busybox image, as every Docker test), ``fake``
(the file-backed engine the pipeline tests use) and ``kubernetes`` (the in-process API
emulator and fake kubelet of ``tests/kube``, or a real cluster when ``KUBECONFIG`` is
set and the ``kube_cluster`` fixture says so). A driver differs only where it declares a
capability (``stop_removes``): the tests read the capability, never the driver's name.

What a ``Harness`` hides is only how each engine is made to do something (a program
that serves or exits, a foreign object with our name, an engine that does not answer).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    Engine,
    EngineError,
    EngineEvent,
    PermanentEngineError,
    Workspace,
)
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE, LABEL_TEMPLATE
from tests.processes import PATIENCE

DRIVERS = ("docker", "fake", "kubernetes")
IMAGE = "gobrave-test-busybox:latest"
DOCKER_URL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
SERVE = ["sh", "-c", "trap 'exit 0' TERM; echo hello contract; while true; do sleep 0.1; done"]
BUSY = ["sh", "-c", "trap 'exit 0' TERM; while true; do :; done"]  # a CPU loop
IDLE = ["sleep", "1000"]  # no CPU at all once it runs
LOOP_WORK = 0.1  # CPU seconds the loop is seen to use before its cores are read
USER = "10001:10001"


@dataclass
class Harness:
    """One driver under test: its engine and how to make it do things."""

    driver: str
    engine: Engine
    installation: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:12]}")
    output: str = "hello contract"  # what a serving program prints
    # The image every spec runs and how the engine gets it: the locally built one, never
    # pulled, unless the driver's cluster must pull one (a real cluster: kube_harness).
    image: str = IMAGE
    pull_policy: str = "never"
    serve: Callable[[], list[str]] = lambda: list(SERVE)
    busy: Callable[[], list[str]] = lambda: list(BUSY)
    idle: Callable[[], list[str]] = lambda: list(IDLE)  # started as the program "serve"
    exit_with: Callable[[int], list[str]] = lambda code: ["sh", "-c", f"exit {code}"]
    before_start: Callable[[ContainerSpec, str], None] = lambda spec, program: None
    foreign: Callable[[str], None] = lambda name: None
    # Removes what ``foreign`` made (None: the engine's ``remove``, which on Kubernetes
    # leaves an object without gobrave's labels alone)
    unforeign: Callable[[str], None] | None = None
    unreachable: Callable[[], Engine] | None = None
    # What tells the workspace ``name`` from one made again (Docker: a mark left inside
    # it; Kubernetes: the claim's uid; the fake: its file's id); None while there is none.
    workspace: Callable[[str], str | None] = lambda name: None
    event_until: Callable[[], dict[str, Any]] = dict  # extra kwargs for a bounded events()
    counter: Iterator[int] = field(default_factory=lambda: iter(range(10_000)))

    def spec(self, command: list[str] | None = None, **extra: Any) -> ContainerSpec:
        labels = {
            LABEL_INSTALLATION: self.installation,
            LABEL_INSTANCE: str(extra.pop("instance", uuid.uuid4())),
            LABEL_TEMPLATE: "contract",
            **extra.pop("labels", {}),
        }
        extra.setdefault("name", f"gb-{self.installation}-{next(self.counter)}")
        return ContainerSpec(
            image=self.image,
            labels=labels,
            command=command if command is not None else self.serve(),
            pull_policy=self.pull_policy,
            user=USER,
            group_add=["10001"],
            **extra,
        )

    def run(self, spec: ContainerSpec, program: str = "serve") -> str:
        self.before_start(spec, program)
        ref = self.engine.create(spec)
        self.engine.start(ref, spec)
        return ref

    def wait(self, ref: str, statuses: set[str], *, timeout: float = 20) -> ContainerState | None:
        """Wait (a deadline, not a sleep) until ``ref``'s status is one of ``statuses``
        ("gone": no object)."""
        deadline = time.monotonic() + timeout * PATIENCE
        while True:
            state = self.engine.inspect(ref)
            status = state.status if state is not None else "gone"
            if status in statuses:
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.driver} {ref}: wanted {statuses}, still {state}")
            time.sleep(0.05)

    def events(
        self, since: str, *, until: Callable[[list[EngineEvent]], bool]
    ) -> list[EngineEvent]:
        """Events from ``since`` until ``until(events so far)`` holds, the stream ends
        (the fake's replay, a watch's end) or the deadline passes."""
        seen: list[EngineEvent] = []
        keys: set[tuple[str, str, str]] = set()
        deadline = time.monotonic() + 20 * PATIENCE
        while time.monotonic() < deadline:
            cursor = seen[-1].cursor if seen else since
            stream = self.engine.events(self.installation, cursor, **self.event_until())
            try:
                for event in stream:
                    if (event.cursor, event.runtime_id, event.action) not in keys:
                        keys.add((event.cursor, event.runtime_id, event.action))
                        seen.append(event)
                    if until(seen):
                        return seen
            finally:
                getattr(stream, "close", lambda: None)()  # a watch ends with its reader
        return seen

    def wait_workspace_gone(self, name: str) -> None:
        """Wait (a deadline) until the workspace ``name`` is gone (a cluster deletes a
        claim after its protection finalizer clears)."""
        deadline = time.monotonic() + 20 * PATIENCE
        while (held := self.workspace(name)) is not None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.driver}: workspace {name} still there ({held})")
            time.sleep(0.05)

    def cleanup(self) -> None:
        for state in self.engine.list_ours(self.installation):
            self.engine.remove(state.runtime_id)


def _docker(request) -> Harness:
    from containers.engines.docker import DockerEngine

    engine = DockerEngine(DOCKER_URL, stop_grace=1)
    if not engine.ping() or not engine.image_present(IMAGE):
        message = "no Docker engine or test image: run scripts/test-engine.sh"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)

    def foreign(name: str) -> None:
        engine._api().create_container(IMAGE, name=name, command=["true"])

    def unreachable() -> Engine:
        return DockerEngine("tcp://127.0.0.1:9", timeout=2)  # a closed loopback port

    def until() -> dict[str, Any]:
        return {"until_nano": time.time_ns() + 2_000_000_000}

    def workspace(name: str) -> str | None:
        """A mark a throw-away container leaves in the volume the first time it looks (a
        volume has no id, and its CreatedAt is its directory's mtime, which an ensure
        moves): a volume made again has lost it."""
        import docker

        api = engine._api()
        try:
            api.inspect_volume(name)
        except docker.errors.NotFound:
            return None
        mark = uuid.uuid4().hex
        reader = api.create_container(
            IMAGE,
            command=["sh", "-c", f"[ -f /w/.mark ] || echo {mark} > /w/.mark; cat /w/.mark"],
            user="0",
            host_config=api.create_host_config(binds={name: {"bind": "/w", "mode": "rw"}}),
        )
        try:
            api.start(reader)
            assert api.wait(reader, timeout=30)["StatusCode"] == 0, api.logs(reader)
            return api.logs(reader).decode().strip()
        finally:
            api.remove_container(reader, force=True)

    return Harness(
        driver="docker",
        engine=engine,
        foreign=foreign,
        unreachable=unreachable,
        event_until=until,
        workspace=workspace,
    )


def _fake(request, tmp_path: Path) -> Harness:
    from containers.engines.fake import FakeEngine

    engine = FakeEngine(f"fake://{tmp_path}/engine")

    def before_start(spec: ContainerSpec, program: str) -> None:
        exit_file = tmp_path / "engine" / "exit-on-start"
        if program.startswith("exit"):
            exit_file.write_text(program.removeprefix("exit"))
        else:
            exit_file.unlink(missing_ok=True)
        engine.set_cpu(spec.name, 1.0 if program == "busy" else 0.0)

    def foreign(name: str) -> None:
        engine.create(ContainerSpec(name=name, image=IMAGE, labels={}))

    def unreachable() -> Engine:
        down = FakeEngine(f"fake://{tmp_path}/down")
        (tmp_path / "down" / "down").write_text("")
        return down

    return Harness(
        driver="fake",
        engine=engine,
        output="fake log line",
        before_start=before_start,
        foreign=foreign,
        unreachable=unreachable,
        workspace=engine.volume_id,
    )


def _kubernetes(request) -> Harness:
    cluster = request.getfixturevalue("kube_cluster")  # tests/kube: never skipped silently
    from tests.engines.kube_harness import harness_for

    return harness_for(cluster, Harness)


@pytest.fixture(params=DRIVERS)
def harness(request, tmp_path) -> Iterator[Harness]:
    if request.param == "docker":
        made = _docker(request)
    elif request.param == "fake":
        made = _fake(request, tmp_path)
    else:
        made = _kubernetes(request)
    yield made
    made.cleanup()


def _text(chunks: Iterator[bytes]) -> str:
    return b"".join(chunks).decode(errors="replace")


# --- create, adopt, refuse ---------------------------------------------------------------


def test_a_retried_create_and_start_adopt_what_the_first_made(harness: Harness) -> None:
    """At-least-once delivery: create and start run again after a crash; one object."""
    spec = harness.spec()
    first = harness.run(spec)
    assert harness.run(spec) == first
    ours = [s for s in harness.engine.list_ours(harness.installation) if s.name == spec.name]
    assert len(ours) == 1, ours
    state = harness.engine.inspect(first)
    assert state is not None and state.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE]


def test_a_foreign_object_holding_our_name_is_a_permanent_error(harness: Harness) -> None:
    spec = harness.spec()
    harness.foreign(spec.name)
    try:
        with pytest.raises(PermanentEngineError, match=spec.name):
            harness.engine.create(spec)
    finally:
        (harness.unforeign or harness.engine.remove)(spec.name)


def test_a_second_instance_cannot_adopt_anothers_object(harness: Harness) -> None:
    spec = harness.spec()
    harness.run(spec)
    other = harness.spec(name=spec.name)  # same name, another instance
    with pytest.raises(PermanentEngineError):
        harness.engine.create(other)


# --- start, stop, remove -----------------------------------------------------------------


def test_start_runs_it_and_a_second_start_changes_nothing(harness: Harness) -> None:
    spec = harness.spec()
    ref = harness.run(spec)
    harness.engine.start(ref, spec)
    state = harness.wait(ref, {"running"})
    assert state is not None and state.name == spec.name


def test_a_start_answers_none_or_the_state_of_the_run_it_made(harness: Harness) -> None:
    """What a start returns stands in for the handler's inspect after it (``_apply``):
    None (the caller inspects), or this container's state, of a live run, never an
    earlier run's that ended (a start after a stop, where the object is made again)."""
    spec = harness.spec()
    harness.before_start(spec, "serve")
    ref = harness.engine.create(spec)
    answers = [harness.engine.start(ref, spec), harness.engine.start(ref, spec)]
    harness.wait(ref, {"running"})
    harness.engine.stop(ref, 1)
    answers.append(harness.engine.start(ref, spec))
    for answer in answers:
        if answer is None:
            continue
        assert answer.name == spec.name and answer.runtime_id == ref, answer
        assert answer.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE], answer
        assert answer.status in ("created", "running"), answer
    if harness.driver == "kubernetes":  # its create of the Pod answers with the Pod
        assert all(answer is not None for answer in answers), answers


def test_a_stop_leaves_what_the_driver_declares_and_is_idempotent(harness: Harness) -> None:
    spec = harness.spec()
    ref = harness.run(spec)
    harness.wait(ref, {"running"})
    harness.engine.stop(ref, 1)
    harness.engine.stop(ref, 1)
    state = harness.engine.inspect(ref)
    if harness.engine.stop_removes:
        assert state is None, state
    else:
        assert state is not None and state.status == "exited", state


def test_a_start_after_a_stop_runs_it_again_from_the_stored_spec(harness: Harness) -> None:
    spec = harness.spec()
    ref = harness.run(spec)
    harness.wait(ref, {"running"})
    harness.engine.stop(ref, 1)
    harness.engine.start(ref, spec)
    state = harness.wait(ref, {"running"})
    assert state is not None and state.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE]


def test_stop_and_remove_of_a_missing_container_succeed(harness: Harness) -> None:
    missing = f"gb-{harness.installation}-missing"
    harness.engine.stop(missing, 1)
    harness.engine.remove(missing)
    assert harness.engine.inspect(missing) is None


def test_remove_leaves_nothing_and_is_idempotent(harness: Harness) -> None:
    spec = harness.spec()
    ref = harness.run(spec)
    harness.engine.remove(ref)
    harness.engine.remove(ref)
    harness.wait(ref, {"gone"})
    assert [s for s in harness.engine.list_ours(harness.installation) if s.name == spec.name] == []


# --- what the engine says ----------------------------------------------------------------


def test_an_exit_gives_its_exit_code(harness: Harness) -> None:
    spec = harness.spec(harness.exit_with(3))
    ref = harness.run(spec, "exit3")
    state = harness.wait(ref, {"exited"})
    assert state is not None and state.exit_code == 3 and not state.oom_killed, state


def test_list_ours_lists_only_this_installation_and_the_labels_asked(harness: Harness) -> None:
    mine = harness.spec(labels={"io.gobrave.run": "r1"})
    other = harness.spec()
    harness.run(mine)
    harness.run(other)
    names = {s.name for s in harness.engine.list_ours(harness.installation)}
    assert names == {mine.name, other.name}
    asked = harness.engine.list_ours(harness.installation, {"io.gobrave.run": "r1"})
    assert [s.name for s in asked] == [mine.name]
    assert harness.engine.list_ours(f"t{uuid.uuid4().hex[:12]}") == []


def test_logs_give_the_output_and_a_missing_containers_logs_are_empty(harness: Harness) -> None:
    spec = harness.spec()
    ref = harness.run(spec)
    harness.wait(ref, {"running"})
    deadline = time.monotonic() + 10 * PATIENCE
    text = ""
    while harness.output not in text and time.monotonic() < deadline:
        text = _text(harness.engine.logs(ref, tail=10))
    assert harness.output in text, text
    assert _text(harness.engine.logs(f"gb-{harness.installation}-missing", tail=10)) == ""


def test_a_follow_gives_the_output_then_ends_at_until(harness: Harness) -> None:
    spec = harness.spec()
    ref = harness.run(spec)
    harness.wait(ref, {"running"})

    async def follow_until_seen() -> str:
        stream = await harness.engine.follow_logs(ref, tail=10, until=time.time() + 20 * PATIENCE)
        text = ""
        try:
            async for chunk in stream:
                text += chunk.decode(errors="replace")
                if harness.output in text:
                    break
        finally:
            await stream.aclose()
        return text

    assert harness.output in asyncio.run(follow_until_seen())
    # A running container that prints nothing new: the follow ends once ``until`` passes,
    # not before (its stream is whole) and with the container still running.
    until = time.time() + 0.5

    async def follow_to_the_end() -> None:
        stream = await harness.engine.follow_logs(ref, tail=1, until=until)
        [chunk async for chunk in stream]

    asyncio.run(follow_to_the_end())
    assert time.time() >= until
    state = harness.engine.inspect(ref)
    assert state is not None and state.status == "running", state


def test_events_report_a_run_and_resume_after_their_cursor(harness: Harness) -> None:
    since = harness.engine.event_cursor_now()
    spec = harness.spec(harness.exit_with(0))
    ref = harness.run(spec, "exit0")
    harness.wait(ref, {"exited"})

    def died(events: list[EngineEvent]) -> bool:
        return any(e.runtime_id == ref and e.action == "die" for e in events)

    events = harness.events(since, until=died)
    actions = [e.action for e in events if e.runtime_id == ref]
    assert {"create", "start", "die"} <= set(actions), actions
    assert actions.index("create") < actions.index("start") < actions.index("die"), actions
    die = next(e for e in events if e.runtime_id == ref and e.action == "die")
    assert die.exit_code == 0 and die.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE]
    # From the die's cursor, what happens next (its removal) and never an event from
    # before it (the create, the start); events *at* it (the die) may come again.
    harness.engine.remove(ref)

    def destroyed(events: list[EngineEvent]) -> bool:
        return any(e.runtime_id == ref and e.action == "destroy" for e in events)

    again = harness.events(die.cursor, until=destroyed)
    later = [e.action for e in again if e.runtime_id == ref]
    assert "destroy" in later, later
    assert not {"create", "start"} & set(later), later
    assert set(later) <= {"die", "stop", "kill", "destroy"}, later
    destroy = next(e for e in again if e.runtime_id == ref and e.action == "destroy")
    assert destroy.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE], destroy


# --- workspaces and health ---------------------------------------------------------------


def test_ensure_workspace_makes_it_once_and_remove_volume_removes_it_idempotently(
    harness: Harness,
) -> None:
    name = f"gobrave-ws-{harness.installation}"
    workspace = Workspace(
        kind="volume",
        source=name,
        uid=10001,
        gid=10001,
        labels={LABEL_INSTALLATION: harness.installation},
    )
    assert harness.workspace(name) is None
    try:
        harness.engine.ensure_workspace(workspace, image=IMAGE)
        made = harness.workspace(name)
        assert made is not None, f"{harness.driver}: no workspace {name} after ensure"
        harness.engine.ensure_workspace(workspace, image=IMAGE)  # a retried create
        assert harness.workspace(name) == made  # the same one, not made again
        harness.engine.remove_volume(name)
        harness.wait_workspace_gone(name)
        harness.engine.remove_volume(name)  # again: nothing left, and that is fine
        harness.wait_workspace_gone(name)
    finally:
        harness.engine.remove_volume(name)


def test_removing_a_workspace_that_never_existed_is_fine(harness: Harness) -> None:
    name = f"gobrave-ws-{harness.installation}-never"
    harness.engine.remove_volume(name)
    assert harness.workspace(name) is None


def test_an_engine_that_does_not_answer_says_why_in_words(harness: Harness) -> None:
    assert harness.unreachable is not None
    engine = harness.unreachable()
    assert engine.ping() is False
    with pytest.raises(EngineError) as raised:
        engine.check()
    assert str(raised.value) and "Traceback" not in str(raised.value)


def _cores_over_one_window(harness: Harness, idle: str, busy: str) -> tuple[float, float]:
    """The cores the idle container and the CPU loop used (``cores_since``), each from a
    look before and one after, in the order idle, busy ... busy, idle: the idle
    container's window holds the loop's.

    An engine that counts CPU time (``cpu_total_ns``) closes the window once the loop's
    counter has gone up by ``LOOP_WORK``: a loaded machine gives the loop less CPU, and
    the window is then longer, never the figure wrong (waited for with a deadline, not
    a margin on how much CPU the machine gives). An engine's own rate (``cpu_cores``) is
    taken as given, once it gives one.
    """
    idle_first, busy_first = harness.engine.stats(idle), harness.engine.stats(busy)
    assert idle_first is not None, f"{harness.driver}: no stats for running {idle}"
    assert busy_first is not None, f"{harness.driver}: no stats for running {busy}"
    deadline = time.monotonic() + 20 * PATIENCE
    while True:
        current = harness.engine.stats(busy)
        assert current is not None, f"{harness.driver}: stats of running {busy} went away"
        busy_cores = current.cores_since(busy_first)
        if current.cpu_cores is not None:
            break  # the engine's own rate: no window of ours to wait for
        used = (current.cpu_total_ns or 0) - (busy_first.cpu_total_ns or 0)
        if busy_cores is not None and used >= LOOP_WORK * 1e9:
            break
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{harness.driver}: the CPU loop {busy} used {used / 1e9} CPU s in "
                f"{current.read_at - busy_first.read_at:.1f} s ({busy_first} then {current})"
            )
        time.sleep(0.05)  # the loop runs meanwhile; the condition above is what is waited on
    idle_last = harness.engine.stats(idle)
    assert idle_last is not None, f"{harness.driver}: stats of running {idle} went away"
    idle_cores = idle_last.cores_since(idle_first)
    assert idle_cores is not None, f"{harness.driver}: no CPU figure: {idle_first}, {idle_last}"
    return idle_cores, busy_cores


def test_stats_tell_a_cpu_loop_from_an_idle_container(harness: Harness) -> None:
    """The loop's CPU is clearly above the idle container's (a sleep: none at all once it
    runs), over the same window: what the idle rule relies on, and true however little
    CPU a loaded machine gives the loop. Stats that were the engine's or the machine's
    (the same figure for both), stood still, or mixed the two up would fail it."""
    assert harness.engine.reports_cpu
    idle = harness.run(harness.spec(harness.idle()))
    busy = harness.run(harness.spec(harness.busy()), "busy")
    harness.wait(idle, {"running"})
    harness.wait(busy, {"running"})
    idle_cores, busy_cores = _cores_over_one_window(harness, idle, busy)
    said = f"{harness.driver}: the idle container used {idle_cores} cores, the loop {busy_cores}"
    assert busy_cores > 0, said
    assert idle_cores * 10 <= busy_cores, said


def test_an_engine_says_whether_it_gives_cpu_figures_and_its_figures_say_their_kind(
    harness: Harness,
) -> None:
    """``stats_served``: True on each test engine (the emulator serves the metrics API
    unless told not to); an engine that does not answer raises rather than say no.
    A driver whose engines may differ declares it (``cpu_discovered``)."""
    assert harness.engine.stats_served() is True
    assert harness.engine.cpu_discovered is (harness.driver == "kubernetes")
    assert harness.unreachable is not None
    with pytest.raises(EngineError):
        harness.unreachable().stats_served(timeout=2)
    ref = harness.run(harness.spec())
    harness.wait(ref, {"running"})
    deadline = time.monotonic() + 20 * PATIENCE
    while (stats := harness.engine.stats(ref)) is None:
        assert time.monotonic() < deadline, f"{harness.driver}: no stats for running {ref}"
        time.sleep(0.05)
    # Docker counts CPU time; the metrics API (and the fake, by default) gives a rate.
    assert stats.is_rate is (harness.driver != "docker"), stats


def test_stats_of_a_missing_or_stopped_container_are_none(harness: Harness) -> None:
    assert harness.engine.stats(f"gb-{harness.installation}-missing") is None
    ref = harness.run(harness.spec())
    harness.wait(ref, {"running"})
    harness.engine.stop(ref, 1)
    harness.wait(ref, {"exited", "gone"})
    assert harness.engine.stats(ref) is None
