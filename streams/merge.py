"""Several async sources as one, for a stream that carries more than one kind of event."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

_DONE = object()


async def merged(primary: AsyncIterator[Any], *others: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Items of every source as they come; ends when ``primary`` ends (the others may end
    before). Back-pressure holds: a source waits while its item waits to be taken (one
    item in hand per source, never more). Closing this closes every source."""
    sources = [primary, *others]
    queue: asyncio.Queue = asyncio.Queue(maxsize=1)

    async def pump(source: AsyncIterator[Any], is_primary: bool) -> None:
        async for item in source:
            await queue.put(item)
        if is_primary:
            await queue.put(_DONE)

    tasks = [
        asyncio.ensure_future(pump(source, index == 0)) for index, source in enumerate(sources)
    ]
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, tasks[0]}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                tasks[0].result()  # the primary failed: raise its error (else _DONE waits)
                continue
            item = getter.result()
            if item is _DONE:
                return
            yield item
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for source in sources:
            with contextlib.suppress(Exception):
                await source.aclose()
