"""The async follow without Docker: the fake engine's ``follow_logs``, the thread adapter
(``follows.follow_in_thread``), and the 1 MiB
cap of ``calls.container_logs_follow``."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator

import pytest

from containers.engines.base import ContainerSpec, EngineError
from containers.engines.calls import LOG_FOLLOW_CUT_NOTE, LOG_MAX_BYTES, _capped
from containers.engines.fake import ENV_PIECE, FakeEngine
from containers.engines.follows import (
    EngineStream,
    follow_in_thread,
)
from tests.processes import PATIENCE

BOUND = 10 * PATIENCE  # what a test waits at most for something that must happen by itself


async def until_true(predicate: Callable[[], bool]) -> None:
    """Wait on the event loop (never blocking it) until ``predicate()`` holds."""
    async with asyncio.timeout(BOUND):
        while not predicate():
            await asyncio.sleep(0.005)


async def read_all(stream) -> list[bytes]:
    async with asyncio.timeout(BOUND):
        return [chunk async for chunk in stream]


class Opener:
    """``open_stream`` for ``follow_in_thread`` that notes the thread it runs on (the
    follow's own thread), so a test waits for that thread to end and no other: threads of
    earlier tests in the same worker process come and go independently."""

    def __init__(self, source) -> None:
        self.source = source
        self.threads: list[threading.Thread] = []

    def __call__(self):
        self.threads.append(threading.current_thread())
        return self.source

    def ended(self) -> bool:
        assert [thread.name for thread in self.threads] == ["engine-stream"], self.threads
        return not self.threads[0].is_alive()


# -- the fake engine ---------------------------------------------------------------------------


@pytest.fixture
def fake(tmp_path) -> FakeEngine:
    return FakeEngine(f"fake://{tmp_path}")


def started(fake: FakeEngine, **spec) -> str:
    ref = fake.create(ContainerSpec(name="c1", image="busybox", labels={}, **spec))
    fake.start(ref)
    return ref


def test_the_fake_follow_gives_its_line_then_its_env_in_pieces_until_the_stop(fake) -> None:
    ref = started(fake, command=["env"], env={"GREETING": "grüße"})

    async def follow() -> tuple[list[bytes], list[bytes]]:
        stream = await fake.follow_logs(ref, tail=10, until=time.time() + 600)
        first = [await anext(stream) for _ in range(4)]
        await asyncio.to_thread(fake.stop, ref, 0)
        return first, await read_all(stream)  # ends once stopped, long before 600 s

    first, rest = asyncio.run(follow())
    chunks = first + rest
    assert b"".join(chunks) == "fake log line\nGREETING=grüße\n".encode(), chunks
    assert chunks[0] == b"fake log line\n"
    assert all(len(piece) <= ENV_PIECE for piece in chunks[1:]), chunks


def test_the_fake_follow_of_a_running_container_ends_at_until(fake) -> None:
    ref = started(fake)

    async def follow() -> tuple[list[bytes], float]:
        until = time.time() + 0.3
        stream = await fake.follow_logs(ref, tail=10, until=until)
        return await read_all(stream), until

    chunks, until = asyncio.run(follow())
    assert chunks == [b"fake log line\n"]
    assert time.time() >= until
    assert fake.inspect(ref).status == "running"


def test_the_fake_follow_of_a_missing_container_is_empty(fake) -> None:
    async def follow() -> list[bytes]:
        return await read_all(await fake.follow_logs("nope", tail=1, until=time.time() + 60))

    assert asyncio.run(follow()) == []


def test_the_fake_follow_of_an_engine_that_is_down_raises_on_open(fake) -> None:
    ref = started(fake)
    (fake.root / "down").touch()
    with pytest.raises(EngineError, match="down"):
        asyncio.run(fake.follow_logs(ref, tail=1, until=time.time() + 60))


# -- the thread adapter ------------------------------------------------------------------------


class Endless:
    """A blocking stream that yields as fast as it is read, counting what it made."""

    def __init__(self) -> None:
        self.produced = 0
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        for number in itertools.count():
            self.produced += 1
            yield b"%d\n" % number

    def close(self) -> None:
        self.closed.set()


def test_a_slow_reader_holds_the_thread_back_at_the_queue_bound() -> None:
    """The thread never runs more than ``bound`` chunks (and the one it waits to put)
    ahead of the reader, however slowly it reads; aclose() ends the thread."""
    source, bound = Endless(), 4
    opener = Opener(source)

    async def follow() -> list[tuple[int, int]]:
        stream = await follow_in_thread(opener, until=time.time() + 600, bound=bound)
        ahead = []
        for consumed in range(30):
            await until_true(lambda c=consumed: source.produced >= c + bound + 1)
            ahead.append((consumed, source.produced - consumed))
            assert await anext(stream) == b"%d\n" % consumed
        await stream.aclose()
        await until_true(opener.ended)
        return ahead

    ahead = asyncio.run(follow())
    assert ahead == [(consumed, bound + 1) for consumed in range(30)], ahead
    assert source.closed.is_set()


class Quiet:
    """A blocking stream with nothing to say: a read waits until ``close()``."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        self.closed.wait()
        return iter(())

    def close(self) -> None:
        self.closed.set()


def test_the_thread_adapter_ends_at_until_on_a_quiet_stream_and_unblocks_its_read() -> None:
    source = Quiet()
    opener = Opener(source)

    async def follow() -> tuple[list[bytes], float]:
        until = time.time() + 0.3
        stream = await follow_in_thread(opener, until=until)
        chunks = await read_all(stream)
        await until_true(opener.ended)
        return chunks, until

    chunks, until = asyncio.run(follow())
    assert chunks == [] and time.time() >= until
    assert source.closed.is_set()


def test_the_thread_adapter_raises_the_open_error_and_gives_an_empty_stream_for_none() -> None:
    def refuse():
        raise EngineError("logs c1: connection refused")

    async def follow(open_stream) -> list[bytes]:
        return await read_all(await follow_in_thread(open_stream, until=time.time() + 60))

    with pytest.raises(EngineError, match="connection refused"):
        asyncio.run(follow(refuse))
    assert asyncio.run(follow(lambda: None)) == []


def test_cancelling_the_reader_stops_the_thread_and_closes_the_stream() -> None:
    source = Quiet()
    opener = Opener(source)

    async def follow() -> None:
        stream = await follow_in_thread(opener, until=time.time() + 600)
        reader = asyncio.create_task(read_all(stream))
        await asyncio.sleep(0)  # the reader runs until it waits for a chunk
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        await until_true(opener.ended)

    asyncio.run(follow())
    assert source.closed.is_set()


def test_an_aclose_from_another_task_ends_the_reader_and_the_thread() -> None:
    source = Quiet()
    opener = Opener(source)

    async def follow() -> list[bytes]:
        stream = await follow_in_thread(opener, until=time.time() + 600)
        reader = asyncio.create_task(read_all(stream))
        await asyncio.sleep(0)  # the reader runs until it waits for a chunk
        await stream.aclose()
        chunks = await reader  # ends at once, long before its 600 s
        await until_true(opener.ended)
        return chunks

    assert asyncio.run(follow()) == []
    assert source.closed.is_set()


# -- EngineStream, the WSGI bridge, decoding, the cap ------------------------------------------


def counted(chunks: list[bytes]) -> tuple[EngineStream, list[str]]:
    """An EngineStream over ``chunks`` that records its release."""
    released: list[str] = []

    async def items() -> AsyncGenerator[bytes, None]:
        for chunk in chunks:
            yield chunk

    async def release() -> None:
        released.append("released")

    return EngineStream(items(), release), released


def test_an_engine_stream_closed_before_its_first_read_releases_once() -> None:
    stream, released = counted([b"a"])
    asyncio.run(stream.aclose())
    asyncio.run(stream.aclose())
    assert released == ["released"]


def test_the_follow_cap_cuts_on_a_character_boundary_ends_with_its_note_and_releases() -> None:
    # 1 MiB of "é" (2 bytes each) and one byte more: the cap falls inside a character.
    chunk = "é".encode() * (LOG_MAX_BYTES // 4)
    stream, released = counted([b"x", chunk, chunk, chunk])

    async def read() -> list[bytes]:
        return await read_all(EngineStream(_capped(stream), stream.aclose))

    data = b"".join(asyncio.run(read()))
    text, note = data[: -len(LOG_FOLLOW_CUT_NOTE)], data[-len(LOG_FOLLOW_CUT_NOTE) :]
    assert note == LOG_FOLLOW_CUT_NOTE
    assert len(text) == LOG_MAX_BYTES - 1, len(text)  # the cut character is left out whole
    assert text.decode() == "x" + "é" * ((LOG_MAX_BYTES - 2) // 2)
    assert released == ["released"]
