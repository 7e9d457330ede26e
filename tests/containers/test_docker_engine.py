"""DockerEngine against a real Docker Engine and the local busybox image.

Needs ``scripts/test-engine.sh`` (starts dockerd, builds gobrave-test-busybox:latest).
Skipped without an engine, except under CI=true where that is a failure. Every test
labels its containers with a fresh installation id and removes them afterwards.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    EngineError,
    EngineEvent,
    Mount,
    PermanentEngineError,
)
from containers.engines.docker import DockerEngine
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE, LABEL_TEMPLATE
from tests.processes import PATIENCE

pytestmark = pytest.mark.docker

IMAGE = "gobrave-test-busybox:latest"
BASE_URL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
HOG = 'x=$(head -c 50000000 /dev/zero | tr "\\0" a); echo survived'

MakeSpec = Callable[..., ContainerSpec]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def runtime() -> DockerEngine:
    rt = DockerEngine(BASE_URL, stop_grace=1)
    if not rt.ping():
        _unavailable("no Docker engine: run scripts/test-engine.sh")
    if not rt.image_present(IMAGE):
        _unavailable(f"no {IMAGE} image: run scripts/test-engine.sh")
    return rt


@pytest.fixture(scope="module")
def raw(runtime: DockerEngine) -> Iterator[docker.APIClient]:
    """The bare SDK, for what the runtime deliberately does not offer (pause, filters)."""
    client = docker.APIClient(base_url=BASE_URL, version="auto", timeout=30)
    yield client
    client.close()


@pytest.fixture
def installations(runtime: DockerEngine) -> Iterator[Callable[[], str]]:
    """Hands out fresh installation ids; removes every container labelled with one."""
    issued: list[str] = []

    def issue() -> str:
        issued.append(f"test-{uuid.uuid4().hex[:12]}")
        return issued[-1]

    yield issue
    for installation in issued:
        for state in runtime.list_ours(installation):
            runtime.remove(state.runtime_id)


@pytest.fixture
def installation(installations: Callable[[], str]) -> str:
    return installations()


@pytest.fixture
def make_spec(installation: str) -> MakeSpec:
    counter = iter(range(1000))

    def make(
        command: list[str] | None, *, installation: str = installation, **kwargs: object
    ) -> ContainerSpec:
        labels = {
            LABEL_INSTALLATION: installation,
            LABEL_INSTANCE: str(kwargs.pop("instance", uuid.uuid4())),
            LABEL_TEMPLATE: "test",
        }
        kwargs.setdefault("name", f"gobrave-{installation}-{next(counter)}")
        kwargs.setdefault("pull_policy", "never")
        kwargs.setdefault("image", IMAGE)
        return ContainerSpec(labels=labels, command=command, **kwargs)  # type: ignore[arg-type]

    return make


def wait_for(
    runtime: DockerEngine, ref: str, statuses: set[str], timeout: float = 10
) -> ContainerState:
    deadline = time.monotonic() + timeout * PATIENCE
    while True:
        state = runtime.inspect(ref)
        if state is not None and state.status in statuses:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{ref}: wanted {statuses}, still {state}")
        time.sleep(0.05)


def _text(chunks: Iterator[bytes]) -> str:
    """``Engine.logs`` read to the end."""
    return b"".join(chunks).decode()


def run(runtime: DockerEngine, spec: ContainerSpec) -> str:
    ref = runtime.create(spec)
    runtime.start(ref)
    return ref


# -- create / start / inspect ------------------------------------------------------------------


def test_create_start_inspect_running(runtime: DockerEngine, make_spec: MakeSpec) -> None:
    spec = make_spec(["sleep", "1000"])
    ref = runtime.create(spec)
    assert runtime.inspect(ref).status == "created"
    runtime.start(ref)
    runtime.start(ref)  # idempotent on a running container
    state = wait_for(runtime, ref, {"running"})
    assert state.runtime_id == ref
    assert state.name == spec.name
    assert state.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE]
    assert state.exit_code is None and not state.oom_killed
    assert state.node_name and state.node_name == runtime.node_name()
    assert state.started_at is not None and state.started_at.tzinfo is not None
    assert state.finished_at is None
    assert runtime.inspect(spec.name) == state  # by name too


def test_create_passes_env_mounts_and_limits(
    runtime: DockerEngine, raw: docker.APIClient, make_spec: MakeSpec, tmp_path: Path
) -> None:
    (tmp_path / "hello").write_text("from host\n")
    spec = make_spec(
        ["sh", "-c", 'echo "$GREETING"; cat /data/hello; touch /data/new'],
        env={"GREETING": "hi env"},
        mounts=[Mount(source=str(tmp_path), target="/data", read_only=True)],
        cpu=0.5,
        memory=64 * 1024 * 1024,
    )
    ref = run(runtime, spec)
    state = wait_for(runtime, ref, {"exited"})
    assert state.exit_code != 0  # the mount is read-only
    logs = _text(runtime.logs(ref))  # stdout and stderr lines may interleave either way
    assert {"hi env", "from host", "touch: /data/new: Read-only file system"} == set(
        logs.splitlines()
    )
    assert not (tmp_path / "new").exists()
    host = raw.inspect_container(ref)["HostConfig"]
    assert host["NanoCpus"] == 500_000_000
    assert host["Memory"] == host["MemorySwap"] == 64 * 1024 * 1024
    assert host["RestartPolicy"]["Name"] in ("", "no")


def test_create_twice_adopts(
    runtime: DockerEngine, raw: docker.APIClient, make_spec: MakeSpec
) -> None:
    spec = make_spec(["sleep", "1000"])
    first = runtime.create(spec)
    assert runtime.create(spec) == first
    runtime.start(first)
    assert runtime.create(spec) == first  # also once running
    same_name = raw.containers(all=True, filters={"name": f"^/{spec.name}$"})
    assert [c["Id"] for c in same_name] == [first]


def test_name_held_by_foreign_container_is_permanent(
    runtime: DockerEngine, make_spec: MakeSpec
) -> None:
    ours = make_spec(["true"], instance="ours")
    foreign = make_spec(["true"], name=ours.name, instance="someone-else")
    runtime.create(foreign)
    with pytest.raises(PermanentEngineError, match="held by"):
        runtime.create(ours)
    unlabelled = ContainerSpec(
        name=f"{ours.name}-x",
        image=IMAGE,
        labels={LABEL_INSTALLATION: ours.labels[LABEL_INSTALLATION]},
    )
    runtime.create(unlabelled)
    with pytest.raises(PermanentEngineError, match="held by"):
        runtime.create(make_spec(["true"], name=unlabelled.name))


# -- images --------------------------------------------------------------------------------------


def test_pull_policy_never_with_missing_image_is_permanent(
    runtime: DockerEngine, make_spec: MakeSpec
) -> None:
    missing = f"gobrave-test-missing-{uuid.uuid4().hex[:8]}:1"
    assert not runtime.image_present(missing)
    with pytest.raises(PermanentEngineError, match=rf"{missing}.*never"):
        runtime.create(make_spec(["true"], image=missing, pull_policy="never"))
    with pytest.raises(EngineError):  # no registry has it (or none is reachable)
        runtime.ensure_image(missing, "if_not_present")
    with pytest.raises(PermanentEngineError, match="unknown pull_policy"):
        runtime.ensure_image(IMAGE, "sometimes")


def test_pull_policy_always_falls_back_to_local_image(runtime: DockerEngine) -> None:
    runtime.ensure_image(IMAGE, "always")  # the pull fails (never pushed); local copy used
    runtime.ensure_image(IMAGE, "if_not_present")
    runtime.ensure_image(IMAGE, "never")


# -- exits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code_seen_by_inspect(runtime: DockerEngine, make_spec: MakeSpec, code: int) -> None:
    ref = run(runtime, make_spec(["sh", "-c", f"exit {code}"]))
    state = wait_for(runtime, ref, {"exited"})
    assert state.exit_code == code
    assert not state.oom_killed
    assert state.started_at is not None and state.finished_at is not None
    # Not finished_at >= started_at: for a process that exits at once the engine can
    # record FinishedAt a few microseconds before StartedAt.
    assert abs(state.finished_at - state.started_at) < dt.timedelta(seconds=5)


def test_bad_command_is_permanent_and_recorded(runtime: DockerEngine, make_spec: MakeSpec) -> None:
    ref = runtime.create(make_spec(["/no/such/binary"]))
    with pytest.raises(PermanentEngineError):
        runtime.start(ref)
    assert "/no/such/binary" in runtime.inspect(ref).error


def test_oom_killed(runtime: DockerEngine, raw: docker.APIClient, make_spec: MakeSpec) -> None:
    if not raw.info().get("MemoryLimit"):
        pytest.skip("this engine's cgroup setup does not enforce memory limits")
    # The kernel always kills the hog, but Docker 20.10 on cgroup v1 misses the OOM
    # notification for a few percent of containers that die at once (OOMKilled stays
    # false, no ``oom`` event). Allow a couple of retries so that race cannot flake us.
    states = []
    for _ in range(3):
        ref = run(runtime, make_spec(["sh", "-c", HOG], memory=6 * 1024 * 1024))
        states.append(wait_for(runtime, ref, {"exited"}, timeout=20))
        assert states[-1].exit_code == 137
        assert "survived" not in _text(runtime.logs(ref))
        if states[-1].oom_killed:
            break
    assert states[-1].oom_killed, states


# -- stop / remove / pause ------------------------------------------------------------------------


def test_stop_kills_a_process_ignoring_sigterm(runtime: DockerEngine, make_spec: MakeSpec) -> None:
    ref = run(runtime, make_spec(["sh", "-c", 'trap "" TERM; sleep 1000']))
    wait_for(runtime, ref, {"running"})
    began = time.monotonic()
    runtime.stop(ref, timeout=1)
    took = time.monotonic() - began
    state = runtime.inspect(ref)
    assert state.status == "exited"
    assert state.exit_code == 137
    assert 0.9 <= took < 10
    runtime.stop(ref, timeout=1)  # idempotent on a stopped container


def test_stop_and_remove_are_idempotent_on_missing(
    runtime: DockerEngine, make_spec: MakeSpec
) -> None:
    missing = f"gobrave-no-such-{uuid.uuid4().hex[:8]}"
    runtime.stop(missing, timeout=1)
    runtime.remove(missing)
    assert runtime.inspect(missing) is None
    assert _text(runtime.logs(missing)) == ""
    with pytest.raises(PermanentEngineError):
        runtime.start(missing)

    ref = run(runtime, make_spec(["sleep", "1000"]))
    runtime.remove(ref)  # force: running is fine
    runtime.remove(ref)
    assert runtime.inspect(ref) is None


def test_start_unpauses(runtime: DockerEngine, raw: docker.APIClient, make_spec: MakeSpec) -> None:
    ref = run(runtime, make_spec(["sleep", "1000"]))
    wait_for(runtime, ref, {"running"})
    raw.pause(ref)
    assert runtime.inspect(ref).status == "paused"
    runtime.start(ref)
    assert runtime.inspect(ref).status == "running"
    raw.pause(ref)
    runtime.stop(ref, timeout=1)  # a paused container stops too
    assert runtime.inspect(ref).status == "exited"


# -- logs / listing ------------------------------------------------------------------------------


def test_logs_tail(runtime: DockerEngine, make_spec: MakeSpec) -> None:
    out = run(runtime, make_spec(["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done"]))
    err = run(runtime, make_spec(["sh", "-c", "echo boom >&2"]))
    wait_for(runtime, out, {"exited"})
    wait_for(runtime, err, {"exited"})
    assert _text(runtime.logs(out, tail=2)) == "line4\nline5\n"
    assert _text(runtime.logs(out)).splitlines() == [f"line{i}" for i in range(1, 6)]
    assert _text(runtime.logs(err)) == "boom\n"


def test_a_local_socket_client_reads_no_proxy_settings(runtime: DockerEngine) -> None:
    """requests would read the proxy variables and ~/.netrc again on every call; a unix
    socket takes no proxy."""
    assert runtime.base_url.startswith("unix://")
    assert runtime._api().trust_env is False
    assert runtime.ping()


def test_list_ours_filters_by_installation(
    runtime: DockerEngine,
    make_spec: MakeSpec,
    installation: str,
    installations: Callable[[], str],
) -> None:
    mine = [runtime.create(make_spec(["true"])), run(runtime, make_spec(["sleep", "1000"]))]
    other = installations()
    runtime.create(make_spec(["true"], installation=other))
    listed = runtime.list_ours(installation)
    assert {s.runtime_id: s.status for s in listed} == {mine[0]: "created", mine[1]: "running"}
    for state in listed:  # what the list gives is what an inspect says
        inspected = runtime.inspect(state.runtime_id)
        assert (state.name, state.labels) == (inspected.name, inspected.labels), state
    assert len(runtime.list_ours(other)) == 1
    assert runtime.list_ours(f"test-{uuid.uuid4().hex[:12]}") == []


# -- events --------------------------------------------------------------------------------------


def _actions(events: list[EngineEvent], ref: str) -> list[str]:
    return [e.action for e in events if e.runtime_id == ref]


def test_events_replay_from_cursor(
    runtime: DockerEngine, make_spec: MakeSpec, installation: str
) -> None:
    since = time.time_ns()
    spec = make_spec(["sh", "-c", "exit 4"])
    ref = run(runtime, spec)
    wait_for(runtime, ref, {"exited"})
    runtime.remove(ref)
    until = time.time_ns() + 300_000_000
    events = list(runtime.events(installation, since, until_nano=until))
    assert _actions(events, ref) == ["create", "start", "die", "destroy"]
    die = next(e for e in events if e.action == "die")
    assert die.exit_code == 4
    assert die.name == spec.name
    assert die.labels[LABEL_INSTANCE] == spec.labels[LABEL_INSTANCE]
    assert "exitCode" not in die.labels
    times = [e.time_nano for e in events]
    assert times == sorted(times) and times[0] >= since // 1_000_000_000 * 1_000_000_000
    # The cursor is inclusive: resuming from the die event delivers it again.
    again = list(runtime.events(installation, die.time_nano, until_nano=until))
    assert die in again
    assert not any(e.time_nano < die.time_nano // 1_000_000_000 * 1_000_000_000 for e in again)
    # Other installations' events are filtered out.
    assert list(runtime.events(f"test-{uuid.uuid4().hex[:12]}", since, until_nano=until)) == []


def test_events_follow_live(runtime: DockerEngine, make_spec: MakeSpec, installation: str) -> None:
    seen: list[EngineEvent] = []
    made: list[str] = []
    stopped = threading.Event()
    # A bound far off: the follower ends when it has seen the container's stop (a busy
    # machine may take seconds to get there), never on a timing margin.
    stream = runtime.events(installation, until_nano=time.time_ns() + 120_000_000_000)

    def follow() -> None:
        for event in stream:
            seen.append(event)
            if made and event.runtime_id == made[0] and event.action == "stop":
                stopped.set()
                return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    ref = run(runtime, make_spec(["sleep", "1000"]))
    made.append(ref)
    wait_for(runtime, ref, {"running"})
    runtime.stop(ref, timeout=1)
    assert stopped.wait(60 * PATIENCE), [(e.action, e.runtime_id[:12]) for e in seen]
    assert _actions(seen, ref)[:2] == ["create", "start"]
    assert {"kill", "die", "stop"} <= set(_actions(seen, ref))


# -- process and engine boundaries -----------------------------------------------------------------


def test_unreachable_engine_is_a_retriable_failure(tmp_path: Path) -> None:
    dead = DockerEngine(f"unix://{tmp_path}/no.sock", timeout=2)
    assert dead.ping() is False
    for call in (lambda: dead.inspect("x"), lambda: dead.events("x"), dead.node_name):
        with pytest.raises(EngineError) as info:
            call()
        assert not isinstance(info.value, PermanentEngineError)


def test_client_is_recreated_after_fork(runtime: DockerEngine) -> None:
    assert runtime.ping()
    parent_client = runtime._client
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's client (or its sockets)
        ok = runtime.ping() and runtime._client is not parent_client
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert runtime._client is parent_client
