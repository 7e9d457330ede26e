"""``DockerEngine.follow_logs`` against the real engine, over both of its ways to read:
natively with aiodocker (unix socket, TCP) and through the thread adapter (the ``ssh://``
fallback, forced here over the unix socket). The image is built FROM scratch by
``scripts/test-engine.sh``; nothing is pulled.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.engines.base import ContainerSpec, EngineError
from containers.engines.docker import DockerEngine
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from tests.processes import PATIENCE

pytestmark = pytest.mark.docker

IMAGE = "gobrave-test-busybox:latest"
BASE_URL = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
SOCKET = BASE_URL.removeprefix("unix://")
BOUND = 10 * PATIENCE  # what a test waits at most for a stream that must end by itself
STEADY = "i=0; while true; do i=$((i+1)); echo line$i; sleep 0.02; done"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup_engine() -> Iterator[DockerEngine]:
    """The sync engine that makes and removes this module's containers."""
    engine = DockerEngine(BASE_URL, stop_grace=1)
    if not engine.ping() or not engine.image_present(IMAGE):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"no Docker engine or no {IMAGE}: run scripts/test-engine.sh")
        pytest.skip(f"no Docker engine or no {IMAGE}: run scripts/test-engine.sh")
    installation = f"test-{uuid.uuid4().hex[:12]}"
    engine.installation = installation  # type: ignore[attr-defined]
    yield engine
    for state in engine.list_ours(installation):
        engine.remove(state.runtime_id)


def start(engine: DockerEngine, command: str) -> str:
    spec = ContainerSpec(
        name=f"gobrave-follow-{uuid.uuid4().hex[:12]}",
        image=IMAGE,
        labels={
            LABEL_INSTALLATION: engine.installation,  # type: ignore[attr-defined]
            LABEL_INSTANCE: str(uuid.uuid4()),
        },
        command=["sh", "-c", command],
        pull_policy="never",
    )
    ref = engine.create(spec)
    engine.start(ref)
    return ref


@pytest.fixture(scope="module")
def steady(setup_engine) -> str:
    """A container that prints a numbered line every 20 ms, shared by the module."""
    return start(setup_engine, STEADY)


@pytest.fixture(scope="module")
def quiet(setup_engine) -> str:
    """A container that printed one line and then nothing, shared by the module."""
    return start(setup_engine, "echo once; sleep 600")


@pytest.fixture(params=["aiodocker", "thread"])
def follower(request) -> DockerEngine:
    """A fresh engine that follows natively, or through the thread adapter."""
    engine = DockerEngine(BASE_URL, stop_grace=1)
    engine.native_follow = request.param == "aiodocker"
    return engine


async def read_lines(stream, count: int) -> list[str]:
    seen = b""
    async with asyncio.timeout(BOUND):
        async for chunk in stream:
            seen += chunk
            if seen.count(b"\n") >= count:
                break
    return seen.decode().splitlines()[:count]


def test_a_printing_container_is_followed_in_order(steady, follower) -> None:
    async def follow() -> list[str]:
        stream = await follower.follow_logs(steady, tail=5, until=time.time() + BOUND)
        try:
            return await read_lines(stream, 40)  # the last 5 lines, then 35 new ones
        finally:
            await stream.aclose()

    lines = asyncio.run(follow())
    first = int(lines[0].removeprefix("line"))
    assert lines == [f"line{i}" for i in range(first, first + 40)], lines


def test_the_stream_ends_when_the_container_is_stopped(setup_engine, follower) -> None:
    ref = start(setup_engine, STEADY)

    async def follow() -> list[str]:
        stream = await follower.follow_logs(ref, tail=1000, until=time.time() + 600)
        first = await read_lines(stream, 1)
        await asyncio.to_thread(setup_engine.stop, ref, 0)
        rest = b""
        async with asyncio.timeout(BOUND):  # it ends by itself, long before its 600 s
            async for chunk in stream:
                rest += chunk
        return first + rest.decode().splitlines()

    lines = asyncio.run(follow())
    assert lines == [f"line{i}" for i in range(1, len(lines) + 1)], lines[-5:]
    assert setup_engine.inspect(ref).status == "exited"


def test_a_quiet_container_ends_at_until(setup_engine, quiet, follower) -> None:
    async def follow() -> tuple[bytes, float]:
        until = time.time() + 0.5
        stream = await follower.follow_logs(quiet, tail=10, until=until)
        seen = b""
        async with asyncio.timeout(BOUND):
            async for chunk in stream:
                seen += chunk
        return seen, until

    seen, until = asyncio.run(follow())
    assert seen == b"once\n"
    assert time.time() >= until  # ended by the deadline, not before it
    assert setup_engine.inspect(quiet).status == "running"


def test_a_missing_container_gives_an_empty_stream(follower) -> None:
    async def follow() -> list[bytes]:
        stream = await follower.follow_logs("gb-no-such", tail=5, until=time.time() + 60)
        async with asyncio.timeout(BOUND):
            return [chunk async for chunk in stream]

    assert asyncio.run(follow()) == []


@pytest.mark.parametrize(
    "base_url", ["unix:///nonexistent/docker.sock", "tcp://127.0.0.1:9"], ids=["unix", "tcp"]
)
@pytest.mark.parametrize("native", [True, False], ids=["aiodocker", "thread"])
def test_an_unreachable_engine_raises_engine_error_on_open(base_url, native) -> None:
    engine = DockerEngine(base_url, timeout=5)
    engine.native_follow = native

    async def follow() -> None:
        await engine.follow_logs("anything", tail=5, until=time.time() + 60)

    with pytest.raises(EngineError, match="anything|ping|Connect|connect"):
        asyncio.run(follow())


# A process of its own, so that no other engine client of the test process is counted:
# it opens a follow, reports the connections it holds while reading, ends the follow by
# aclose() or by cancelling the task reading it, and reports when it holds no more than
# before the follow. The thread adapter's follow has a client of its own, but takes its
# API version from the engine's sync client, whose pool keeps the connections of its
# ordinary calls: those are there before the follow (the baseline) and after it.
PROBE = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from containers.engines.docker import DockerEngine
    from tests.engine_connections import engine_connections

    base_url, ref, native, how, socket, bound = sys.argv[1:]
    engine = DockerEngine(base_url)
    engine.native_follow = native == "1"

    async def connections(done):
        async with asyncio.timeout(float(bound)):
            while not done(held := engine_connections(os.getpid(), socket)):
                await asyncio.sleep(0.02)
        return held

    async def main():
        if native != "1":
            engine.ping()  # the sync client and its pool, before the follow
        baseline = engine_connections(os.getpid(), socket)
        stream = await engine.follow_logs(ref, tail=5, until=time.time() + 600)
        first = await anext(stream)
        reading = await connections(lambda held: held > baseline)
        if how == "aclose":
            await stream.aclose()
        else:
            async def read():
                async for _ in stream:
                    pass
            task = asyncio.create_task(read())
            await asyncio.sleep(0)  # the task runs until it waits on the engine for more
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        after = await connections(lambda held: held == baseline)
        report = {"baseline": baseline, "reading": reading, "after": after}
        print(json.dumps({"first": first.decode(), **report}))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("how", ["aclose", "cancel"])
def test_ending_a_follow_leaves_no_engine_connection(quiet, follower, how) -> None:
    native = "1" if follower.native_follow else "0"
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, BASE_URL, quiet, native, how, SOCKET, str(BOUND)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=2 * BOUND,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    report = json.loads(probe.stdout)
    baseline = report["baseline"]
    if follower.native_follow:  # nothing but the follow talks to the engine, on one connection
        assert (baseline, report["reading"]) == (0, 1), report
    assert report["reading"] > baseline, report
    assert report == {
        "first": "once\n",
        "baseline": baseline,
        "reading": report["reading"],
        "after": baseline,
    }, report
