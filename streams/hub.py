"""One reader per web process for what many streams watch (an instance's state, the queue
dashboard), instead of one query per viewer.

A ``Topic`` names a sync ``read(keys) -> {key: value}`` (one query for every key watched
in this process) and how often to run it. ``watch(topic, key)`` gives an async iterator
of that key's value: the current one first, then each change. One poller task per topic
per event loop runs while anyone watches, in a worker thread through ``db_call`` (no
connection held between reads), and stops when the last watcher leaves.

A watcher keeps only the newest value (a slow one skips values, it never makes the hub
buffer), so memory is bounded by the number of watchers, not by how much changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from streams.guard import db_call

log = logging.getLogger(__name__)

MISSING = object()  # the value of a key that ``read`` did not return (gone)


@dataclass(frozen=True)
class Topic:
    name: str
    read: Callable[[list], dict]
    every: float = 1.0


@dataclass(eq=False)
class _Watch:
    key: Hashable
    value: Any = None
    version: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class _Poller:
    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.watches: set[_Watch] = set()
        self.task: asyncio.Task | None = None

    def publish(self, values: dict) -> None:
        for watch in self.watches:
            value = values.get(watch.key, MISSING)
            if watch.version == 0 or value != watch.value:
                watch.value = value
                watch.version += 1
                watch.changed.set()

    async def run(self) -> None:
        while self.watches:
            keys = sorted({watch.key for watch in self.watches}, key=str)
            try:
                values = await db_call(self.topic.read, keys=keys)
            except Exception:  # noqa: BLE001 - a database hiccup: say it, try again
                log.exception("stream hub %s: read failed", self.topic.name)
            else:
                self.publish(values)
            await asyncio.sleep(self.topic.every)


_pollers: dict[tuple[int, str], _Poller] = {}


async def watch(topic: Topic, key: Hashable) -> AsyncIterator[Any]:
    """The value of ``key`` in ``topic`` now, then at each change (``MISSING`` when gone)."""
    loop = asyncio.get_running_loop()
    slot = (id(loop), topic.name)
    poller = _pollers.get(slot)
    if poller is None or poller.task is None or poller.task.done():
        poller = _pollers[slot] = _Poller(topic)
    mine = _Watch(key)
    poller.watches.add(mine)
    if poller.task is None:
        poller.task = loop.create_task(poller.run())
    seen = 0
    try:
        while True:
            await mine.changed.wait()
            mine.changed.clear()
            if mine.version != seen:
                seen = mine.version
                yield mine.value
    finally:
        poller.watches.discard(mine)
        if not poller.watches and _pollers.get(slot) is poller:
            del _pollers[slot]
