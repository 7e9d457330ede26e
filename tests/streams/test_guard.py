"""streams.guard.guarded, streams.guard.StreamBody and streams.merge.merged: how a
stream ends, and what it closes.

Pure asyncio, no server: sources are small async generators that record whether they
were closed; ``check`` and ``finish`` are plain coroutines that record their calls.
"""

from __future__ import annotations

import asyncio
import contextlib

from streams.guard import KEEPALIVE, Ended, StreamBody, guarded
from streams.merge import merged


class Source:
    """An async source of ``items``, then (with ``hang``) nothing more, ever."""

    def __init__(self, items=(), *, hang: bool = False, fail: Exception | None = None):
        self.items, self.hang, self.fail = list(items), hang, fail
        self.closed = False

    async def run(self):
        try:
            for item in self.items:
                yield item
            if self.fail is not None:
                raise self.fail
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed = True


class Calls:
    def __init__(self, reasons=()):
        self.reasons = list(reasons)
        self.checks = 0
        self.finished = 0

    async def check(self):
        self.checks += 1
        return self.reasons.pop(0) if self.reasons else None

    async def finish(self):
        self.finished += 1


def run(source: Source, calls: Calls, **bounds) -> list:
    bounds = {"idle": 60.0, "total": 60.0, "every": 60.0, **bounds}

    async def collect():
        return [
            item
            async for item in guarded(
                source.run(), check=calls.check, finish=calls.finish, **bounds
            )
        ]

    return asyncio.run(collect())


def test_the_sources_end_ends_the_stream_without_a_reason_and_closes_everything():
    source, calls = Source(["a", "b"]), Calls()
    assert run(source, calls) == ["a", "b", Ended("")]
    assert source.closed and calls.finished == 1


def test_a_quiet_source_ends_after_idle_seconds_and_is_closed():
    source, calls = Source(["a"], hang=True), Calls()
    items = run(source, calls, idle=0.05)
    assert items == ["a", Ended("nothing new for 0.05 s; open the stream again")]
    assert source.closed and calls.finished == 1


def test_the_total_bound_ends_a_busy_stream():
    async def endless():
        while True:
            await asyncio.sleep(0)
            yield "x"

    calls = Calls()

    async def collect():
        seen = []
        async for item in guarded(
            endless(), idle=60, total=0.05, every=60, check=calls.check, finish=calls.finish
        ):
            seen.append(item)
        return seen

    items = asyncio.run(collect())
    assert items[-1] == Ended("the stream reached its time limit (0.05 s); open it again")
    assert set(items[:-1]) == {"x"} and calls.finished == 1


def test_a_check_that_gives_a_reason_ends_the_stream_with_it():
    source, calls = (
        Source(hang=True),
        Calls(reasons=[None, "your login or token is no longer valid"]),
    )
    items = run(source, calls, every=0.01)
    assert items == [Ended("your login or token is no longer valid")]
    assert calls.checks == 2 and source.closed and calls.finished == 1


def test_a_failing_source_ends_the_stream_saying_so():
    source, calls = Source(["a"], fail=OSError("engine gone")), Calls()
    assert run(source, calls) == ["a", Ended("the source failed: engine gone")]
    assert calls.finished == 1


def test_keepalives_come_while_quiet_and_do_not_count_as_activity():
    source, calls = Source(hang=True), Calls()
    items = run(source, calls, keepalive=0.01, idle=0.2)
    assert items[-1] == Ended("nothing new for 0.2 s; open the stream again")
    assert items[:-1] and set(map(id, items[:-1])) == {id(KEEPALIVE)}


def test_a_consumer_that_goes_away_closes_the_source_at_once():
    source, calls = Source(["a"], hang=True), Calls()

    async def consume_then_leave():
        stream = guarded(
            source.run(), idle=60, total=60, every=60, check=calls.check, finish=calls.finish
        )
        task = asyncio.ensure_future(anext(stream))
        assert await task == "a"
        waiting = asyncio.ensure_future(anext(stream))  # waits on the quiet source
        await asyncio.sleep(0)
        waiting.cancel()  # the client disconnected: Django cancels the response's task
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return source.closed, calls.finished

    assert asyncio.run(consume_then_leave()) == (True, 1)


def _write_body(body: StreamBody, *, stuck: bool) -> asyncio.Task:
    """The server's writer of ``body``, as Django's handler writes it (closing the body
    however it ends); with ``stuck`` its first write never completes (a client that
    takes nothing)."""

    async def write() -> None:
        async with contextlib.aclosing(aiter(body)) as chunks:
            async for _ in chunks:
                if stuck:
                    await asyncio.Event().wait()

    return asyncio.ensure_future(write())


def test_a_body_whose_client_takes_nothing_for_stall_seconds_is_dropped():
    source, drops = Source(["a", "b"], hang=True), []

    async def stall():
        writer = _write_body(
            StreamBody(source.run(), stall=0.05, drop=lambda: drops.append(1)), stuck=True
        )
        while not drops:
            await asyncio.sleep(0.01)
        done = writer.done()
        writer.cancel()  # what the server does once the connection is reset
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        return done

    assert asyncio.run(stall()) is False  # the server, not the body, ends the write
    assert drops == [1] and source.closed


def test_without_a_way_to_drop_the_connection_a_stalled_write_is_cancelled():
    source = Source(["a"], hang=True)

    async def stall():
        writer = _write_body(StreamBody(source.run(), stall=0.05), stuck=True)
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        return writer.cancelled()

    assert asyncio.run(stall()) is True
    assert source.closed


def test_a_client_that_takes_every_chunk_is_never_dropped():
    source, drops = Source(["a"] * 100), []

    async def write():
        await _write_body(
            StreamBody(source.run(), stall=0.05, drop=lambda: drops.append(1)), stuck=False
        )
        await asyncio.sleep(0.1)  # a timer left behind would fire meanwhile

    asyncio.run(write())
    assert drops == [] and source.closed


def test_merged_ends_with_its_primary_and_closes_the_others():
    primary, other = Source(["p1", "p2"]), Source(["o1"], hang=True)

    async def collect():
        return [item async for item in merged(primary.run(), other.run())]

    items = asyncio.run(collect())
    assert sorted(items) == ["o1", "p1", "p2"] and items.index("p1") < items.index("p2")
    assert primary.closed and other.closed


def test_merged_holds_one_item_per_source_while_its_reader_waits():
    produced = []

    async def counting():
        for n in range(100):
            produced.append(n)
            yield n

    async def read_one_then_wait():
        stream = merged(Source(hang=True).run(), counting())
        first = await anext(stream)
        for _ in range(20):
            await asyncio.sleep(0)  # let the source run as far as it may
        await stream.aclose()
        return first, len(produced)

    first, made = asyncio.run(read_one_then_wait())
    assert first == 0 and made <= 3, made  # one taken, one queued, one waiting to be put
