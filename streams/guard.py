"""The loop every stream runs: its source, bounded in time, checked while it is open.

``guarded(source, ...)`` passes on what an async ``source`` yields (a container's output,
a page's updates) and ends, yielding an ``Ended`` with the reason said to the viewer:

1. when the source ends (the container stopped or was removed): ``Ended("")``, no reason
   to say; a source that fails ends it as well, saying so;
2. after ``idle`` seconds without an item, or ``total`` seconds in all;
3. when ``check`` (awaited every ``every`` seconds; the lease's renewal and the access
   rule, ``streams.services.stream_keep``) gives a reason;
4. when the consumer goes away (the client disconnected: the task is cancelled).

However it ends, the source is closed (``aclose``: the engine connection is closed at
once) and ``finish`` runs (the lease is given back). A slow reader holds the loop at its
``yield``: nothing is read from the source meanwhile, so nothing piles up in the server
(the engine's stream waits behind TCP's own back-pressure); while it waits, nothing
here runs (no check, no renewal), so ``StreamBody`` drops a client that takes nothing
for ``streams.stall_seconds``. ``keepalive`` yields ``KEEPALIVE`` after that long
without an item (SSE comments that keep proxies from closing a quiet stream; they do
not count as activity for ``idle``). ``total_said=False`` ends at ``total`` without a
reason (the viewer asked for that bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ended:
    reason: str


KEEPALIVE = object()


async def db_call(function: Callable[..., Any], /, **kwargs: Any) -> Any:
    """``function(**kwargs)`` in a worker thread, whose database connection goes back to
    the pool as soon as it returns: a stream holds no connection between its checks."""

    def call() -> Any:
        try:
            return function(**kwargs)
        finally:
            connections.close_all()

    return await sync_to_async(call, thread_sensitive=False)()


async def guarded(
    source: AsyncIterator[Any],
    *,
    idle: float,
    total: float,
    every: float,
    check: Callable[[], Awaitable[str | None]],
    finish: Callable[[], Awaitable[None]],
    keepalive: float | None = None,
    total_said: bool = True,
) -> AsyncIterator[Any]:
    loop = asyncio.get_running_loop()
    start = last = quiet_since = loop.time()
    next_check = start + every
    # One task reads the source into a one-item queue for the stream's whole life (a
    # read is never cancelled by a deadline, which would break the source mid-read);
    # a slow consumer leaves the item in the queue and the reader waits behind it.
    queue: asyncio.Queue = asyncio.Queue(maxsize=1)
    reader = asyncio.ensure_future(_read_into(source, queue))
    try:
        while True:
            now = loop.time()
            if now - start >= total:
                said = f"the stream reached its time limit ({total:g} s); open it again"
                yield Ended(said if total_said else "")
                return
            if now - last >= idle:
                yield Ended(f"nothing new for {idle:g} s; open the stream again")
                return
            if now >= next_check:
                reason = await check()
                if reason:
                    yield Ended(reason)
                    return
                next_check = loop.time() + every
            if not queue.empty():  # an item is there: no timer to set
                kind, item = queue.get_nowait()
            else:
                wake = min(start + total, last + idle, next_check)
                if keepalive is not None:
                    wake = min(wake, quiet_since + keepalive)
                try:
                    async with asyncio.timeout_at(wake):
                        kind, item = await queue.get()
                except TimeoutError:
                    if keepalive is not None and loop.time() - quiet_since >= keepalive:
                        quiet_since = loop.time()
                        yield KEEPALIVE
                    continue
            if kind is _END:
                yield Ended("")
                return
            if kind is _FAILED:
                log.warning("stream source failed: %r", item)
                yield Ended(f"the source failed: {item}")
                return
            last = quiet_since = loop.time()
            yield item
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        with contextlib.suppress(Exception):
            await source.aclose()
        await asyncio.shield(finish())


_ITEM, _END, _FAILED = object(), object(), object()


async def _read_into(source: AsyncIterator[Any], queue: asyncio.Queue) -> None:
    try:
        async for item in source:
            await queue.put((_ITEM, item))
    except Exception as exc:  # noqa: BLE001 - handed to the consumer, which says it
        await queue.put((_FAILED, exc))
    else:
        await queue.put((_END, None))


class StreamBody:
    """The body of a ``StreamingHttpResponse``: an async iterator of bytes.

    Django closes a response from a thread (``close()``), without closing its async
    iterator; this closes it on its own event loop at once, so the engine connection and
    the lease are given back even when the client went away while the stream waited on
    a write.

    A client that takes nothing for ``stall`` seconds (its socket's buffers full: the
    server's write of a chunk waits) is dropped: ``drop()`` aborts its connection, which
    the server reports as a disconnect, so the stream ends as when the client goes away
    (without ``drop``, the task that writes the chunk is cancelled, with the same
    outcome). While the write waits the guard's loop waits too (no check, no renewal of
    the lease), hence the bound: ``streams.stall_seconds``, at most half a lease.
    """

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        stall: float | None = None,
        drop: Callable[[], None] | None = None,
    ) -> None:
        self._chunks = chunks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stall = stall
        self._drop = drop

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._run()

    async def _run(self) -> AsyncIterator[bytes]:
        loop = self._loop = asyncio.get_running_loop()
        writer = asyncio.current_task()
        try:
            async for chunk in self._chunks:
                timer = None
                if self._stall is not None and writer is not None:
                    timer = loop.call_later(self._stall, self._stalled, writer)
                try:
                    yield chunk  # back here when the chunk has been written
                finally:
                    if timer is not None:
                        timer.cancel()
        finally:
            await self._chunks.aclose()

    def _stalled(self, writer: asyncio.Task) -> None:
        log.info("stream: the client took nothing for %g s; its connection is dropped", self._stall)
        if self._drop is not None:
            with contextlib.suppress(Exception):
                self._drop()
                return
        writer.cancel()

    def close(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def close_now() -> None:
            task = loop.create_task(self._chunks.aclose())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(close_now)
