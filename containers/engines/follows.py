"""Streams of engine output between blocking and asynchronous code.

``Engine.follow_logs`` is asynchronous (docs/architecture.md, "Engines and streams"). One
adapter sits at its edge:

- ``follow_in_thread``: a driver whose transport has no async client (Docker over
  ``ssh://``) runs its blocking stream on a thread of its own, which feeds a **bounded**
  asyncio queue. Cost: one thread per follower (its stack, mostly untouched virtual
  memory, and a switch per chunk) plus at most ``QUEUE_CHUNKS`` chunks; a slow reader
  blocks the thread, which stops reading the engine.

``EngineStream`` is what a driver's ``follow_logs`` returns. Its callers are on an event
loop (the web tier's streams: ``containers.live``), which decode and scrub the chunks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterator,
)
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)

QUEUE_CHUNKS = 8  # Docker's frames are at most 16 KiB: at most 128 KiB queued per follower
T = TypeVar("T")
_END = object()


class EngineStream:
    """An engine's output stream, as ``Engine.follow_logs`` returns it: an async iterator
    of chunks and one ``release`` that frees what it holds (the engine connection, a thread).

    ``release`` runs once, whichever comes first: the chunks end (or raise, or their task
    is cancelled) or ``aclose()`` is awaited, also before the first read (an async
    generator closed before its first step never runs its own ``finally``). To stop a
    reader from another task, cancel the reader; an ``aclose()`` from another task still
    releases the connection at once, and the reader's next read ends.
    """

    def __init__(
        self,
        chunks: AsyncGenerator[bytes, None] | None,
        release: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._chunks = chunks
        self._release = release

    @classmethod
    def empty(cls) -> EngineStream:
        """No output and nothing held (the container does not exist)."""
        return cls(None)

    def __aiter__(self) -> EngineStream:
        return self

    async def __anext__(self) -> bytes:
        if self._chunks is None:
            raise StopAsyncIteration
        try:
            return await anext(self._chunks)
        except BaseException:  # the end, a dropped stream or a cancellation: release now
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the chunks and release what the stream holds; idempotent."""
        chunks, self._chunks = self._chunks, None
        release, self._release = self._release, None
        try:
            if chunks is not None:
                with contextlib.suppress(RuntimeError):  # being read by another task
                    await chunks.aclose()
        finally:
            if release is not None:
                await release()


class BlockingStream(Protocol):
    """A driver's blocking output stream: chunks as the engine sends them.

    ``close()`` may be called from any thread, also while another thread is blocked in a
    read, and must end that read (e.g. shut the socket down); calling it twice is fine.
    """

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class _Pump:
    """The worker thread of one ``follow_in_thread``: opens the stream, then puts each
    chunk in the queue, waiting while it is full; ``stop()`` ends it from the loop."""

    def __init__(
        self,
        open_stream: Callable[[], BlockingStream | None],
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue,
        opened: asyncio.Future,
    ) -> None:
        self.open_stream = open_stream
        self.loop = loop
        self.queue = queue
        self.opened = opened
        self.lock = threading.Lock()  # orders stop() against the submission of a put
        self.stopped = False
        self.stream: BlockingStream | None = None
        self.pending: concurrent.futures.Future | None = None
        self.thread = threading.Thread(target=self.run, name="engine-stream", daemon=True)

    def _tell(self, outcome: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self.loop.call_soon_threadsafe(outcome)

    def _settle(self, error: BaseException | None) -> None:
        def settle() -> None:
            if self.opened.done():
                return
            if error is None:
                self.opened.set_result(None)
            else:
                self.opened.set_exception(error)

        self._tell(settle)

    def _put(self, item: object) -> bool:
        """Put ``item`` in the queue, waiting while it is full; False once stopped."""
        with self.lock:
            if self.stopped:
                return False
            try:
                self.pending = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
            except RuntimeError:  # the loop is closed
                return False
        try:
            self.pending.result()
        except BaseException:  # noqa: BLE001 - cancelled by stop(), or the loop went away
            return False
        return True

    def run(self) -> None:
        try:
            stream = self.open_stream()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            self._settle(exc)
            return
        with self.lock:
            self.stream = stream
            stopped = self.stopped
        if stopped:
            self._close_stream()
            return
        self._settle(None)
        try:
            for chunk in stream or ():
                if not self._put(chunk):
                    return
        except Exception as exc:  # noqa: BLE001 - the stream dropped or was closed: it ends
            log.debug("engine stream ended: %s", exc)
        finally:
            self._close_stream()
            self._put(_END)

    def _close_stream(self) -> None:
        stream = self.stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def stop(self) -> None:
        """End the thread at once: no further put, the waiting one cancelled, the stream
        closed (which ends a read in progress). Idempotent; never blocks on the engine."""
        with self.lock:
            self.stopped = True
            pending = self.pending
        if pending is not None:
            pending.cancel()
        self._close_stream()


async def follow_in_thread(
    open_stream: Callable[[], BlockingStream | None],
    *,
    until: float,
    bound: int = QUEUE_CHUNKS,
) -> EngineStream:
    """Open a blocking stream on a new thread and read it asynchronously (the
    ``Engine.follow_logs`` contract for a driver without an async transport).

    1. A thread calls ``open_stream()``; its error (e.g. ``EngineError``) raises here.
       ``None`` (no such container) gives an empty iterator.
    2. The thread reads the chunks into a queue of ``bound`` chunks; while the queue is
       full it waits, so it reads no more from the engine than the reader takes.
    3. The iterator ends when the stream ends or drops, or at ``until`` (epoch seconds)
       even when nothing comes. Its end, ``aclose()`` or a cancellation stops the thread
       (``_Pump.stop``): the stream is closed and the thread exits at once.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(maxsize=bound)
    opened: asyncio.Future = loop.create_future()
    pump = _Pump(open_stream, loop, queue, opened)
    pump.thread.start()
    try:
        await opened
    except BaseException:
        pump.stop()
        raise

    async def release() -> None:
        pump.stop()
        while not queue.empty():  # no put can come after stop(): room for the end
            queue.get_nowait()
        queue.put_nowait(_END)  # a reader waiting in another task ends

    return EngineStream(_drain(queue, until), release)


async def _drain(queue: asyncio.Queue, until: float) -> AsyncGenerator[bytes, None]:
    while (left := until - time.time()) > 0:
        try:
            async with asyncio.timeout(left):
                item = await queue.get()
        except TimeoutError:
            return
        if item is _END:
            return
        yield item
