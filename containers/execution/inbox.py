"""A follower's inbox: the events its engine's stream delivered, waiting for the
monitor's appliers (``containers.execution.appliers``).

One engine's events are applied in parallel across instances and in the stream's order
for each instance:

1. ``put`` files each event in one of ``shards`` queues by its key (the instance it is
   about: every event of one instance lands in the same shard, in the stream's order)
   and gives it a sequence number. It waits while ``limit`` events are unapplied (the
   engine then holds the rest).
2. Each shard is a batch the appliers run (``Shard.apply_batch``): at most one applier
   works on one shard at a time, up to ``BATCH`` events per turn (handed over at once:
   the follower writes those of distinct instances that it can in one transaction),
   then the shard gets in line again if more wait, so a busy engine does not starve a
   quiet one. An engine with many instances keeps up to ``shards`` appliers busy.
3. The watermark: the events are applied out of the stream's order across shards, so
   the point the monitor's cursor may move to is the last event before which every
   event is applied (``reached``, called with that event's ``mark``). A monitor killed
   meanwhile replays from there: the events past the watermark that were applied
   already are applied again, which changes nothing.

Thread-safe: one thread puts (the follower), the appliers apply.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from containers.engines.base import EngineEvent

BATCH = 64  # events an applier applies for one shard before the next batch's turn


class Delivered(NamedTuple):
    seq: int
    event: EngineEvent
    clean: bool  # a clean exit, as the stream's order says (``monitor.StreamSeen``)


class Shard:
    """One shard's events, in the stream's order; a ``Batch`` of the appliers."""

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox
        self.queue: deque[Delivered] = deque()
        self.scheduled = False  # with an applier, or in line for one

    def apply_batch(self) -> None:
        """Apply up to ``BATCH`` waiting events, in order, in one call of ``apply``
        (an applier's turn: the follower may write several instances' in one
        transaction); if more wait, get in line again. Never runs twice at once for one
        shard."""
        inbox = self.inbox
        with inbox.changed:
            items = [self.queue.popleft() for _ in range(min(BATCH, len(self.queue)))]
            inbox.applying += len(items)
        if inbox.stopping.is_set():  # left unapplied: the watermark stays before them
            with inbox.changed:
                inbox.applying -= len(items)
                inbox.changed.notify_all()
            return
        try:
            if items:
                inbox.apply([(item.event, item.clean) for item in items])
        finally:
            inbox.applied([item.seq for item in items])
        with inbox.changed:
            if not self.queue:
                self.scheduled = False
                inbox.changed.notify_all()
                return
        inbox.schedule(self)


class Inbox:
    """See the module docstring. ``apply([(event, clean), ...])`` applies a shard's
    events in their order and never raises; ``reached(seq, mark)`` is told each time
    the watermark moves (from an applier's thread; ``seq`` orders the marks: a later
    call may carry an earlier one)."""

    def __init__(
        self,
        *,
        shards: int,
        limit: int,
        schedule: Callable[[Shard], None],
        stopping: threading.Event,
        apply: Callable[[list[tuple[EngineEvent, bool]]], None],
        reached: Callable[[int, Any], None],
    ) -> None:
        self.limit = limit
        self.schedule = schedule
        self.stopping = stopping
        self.apply = apply
        self.reached = reached
        self.changed = threading.Condition()  # guards everything below
        self.shards = [Shard(self) for _ in range(max(1, shards))]
        self.unapplied: deque[tuple[int, Any]] = deque()  # (seq, mark), the stream's order
        self.done: set[int] = set()  # applied, not yet at the watermark
        self.applying = 0  # events in an applier's hands now
        self.seq = 0

    def __len__(self) -> int:
        with self.changed:
            return len(self.unapplied)

    def put(self, event: EngineEvent, *, key: str, clean: bool, mark: Any) -> None:
        """File ``event`` (see the module docstring, step 1); ``mark``: what the
        watermark reports once it and every event before it are applied."""
        with self.changed:
            while len(self.unapplied) >= self.limit and not self.stopping.is_set():
                self.changed.wait(0.1)
            self.seq += 1
            self.unapplied.append((self.seq, mark))
            shard = self.shards[hash(key) % len(self.shards)]
            shard.queue.append(Delivered(self.seq, event, clean))
            if shard.scheduled:
                return
            shard.scheduled = True
        self.schedule(shard)

    def applied(self, seqs: list[int]) -> None:
        """``seqs`` are applied (or given up): move the watermark past every event
        applied without a gap before it."""
        with self.changed:
            self.applying -= len(seqs)
            self.done.update(seqs)
            moved = None
            while self.unapplied and self.unapplied[0][0] in self.done:
                moved = self.unapplied.popleft()
                self.done.discard(moved[0])
            self.changed.notify_all()
        if moved is not None:
            self.reached(*moved)

    def drained(self) -> None:
        """Wait until every event put is applied (or the monitor stops)."""
        with self.changed:
            while self.unapplied and not self.stopping.is_set():
                self.changed.wait(0.1)

    def settle(self, timeout: float) -> bool:
        """Wait until no event is in an applier's hands (the monitor is stopping: no new
        one is taken), at most ``timeout`` seconds; False if one still is."""
        with self.changed:
            return self.changed.wait_for(lambda: self.applying == 0, timeout)
