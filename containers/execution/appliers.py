"""The monitor's appliers: a few threads, shared by every engine followed, that write
what the engines' events say into the database.

A follower thread per engine only reads its event stream and hands each event over
(``Follower.deliver``); it holds no database connection while it waits, which may be
for hours. The appliers take a follower with events waiting, apply a batch of them in
order (one follower is never applied by two appliers at once: its events keep their
stream's order) and put it back in line if more wait, so a busy engine does not starve
a quiet one. So a monitor following N engines holds at most ``size`` connections for
its events, whatever N is.

Threads start on demand, up to ``size``, and end after ``IDLE_SECONDS`` without work
(an idle monitor keeps none). With a connection pool each applier gives its connection
back whenever no follower waits; without one it keeps it until it ends (a new
connection per event would cost more than the event).

An applier's commits do not wait for the WAL flush (``outbox.conf.worker_session``, as
a worker's: 3 ms a commit on the project's machine, one or two per event). Everything
it writes is redone if a crashed database server loses it: a crash loses only the last
commits, in order, so a cursor is never kept past an event whose state was lost (the
cursor is stored after its events are applied) and the stream replays them; a loss
the monitor does not see end its connection is repaired by the next reconcile.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Protocol

from django.db import close_old_connections, connection

from outbox.conf import worker_session

log = logging.getLogger(__name__)

IDLE_SECONDS = 5.0
CONNECTION_CHECK_EVERY = 1.0  # an applier drops an unusable connection this often


class Batch(Protocol):
    def apply_batch(self) -> None:
        """Apply some waiting events in order; schedule itself again if more wait."""


def pooled() -> bool:
    """True when connections come from a pool (closing one only gives it back)."""
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


def _session() -> None:
    """Commit without waiting for the WAL flush on this thread's connection (see the
    module docstring); once per connection."""
    try:
        worker_session(connection)
    except Exception:  # noqa: BLE001 - no database now: the batch's own calls say so
        connection.close()


class Appliers:
    """Up to ``size`` threads that run ``apply_batch`` of whatever is scheduled, in turn.

    ``schedule`` is thread-safe and never blocks. ``stopping``: once set, an idle
    applier ends at once and a waiting batch is left (the monitor is stopping).
    """

    def __init__(self, size: int, stopping: threading.Event, name: str = "monitor-apply") -> None:
        self.size = size
        self.stopping = stopping
        self.name = name
        self._ready: queue.SimpleQueue[Batch] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a batch (one taken counts until accounted)
        self._waiting = 0  # batches scheduled and not yet accounted as taken
        self._started = 0

    @property
    def threads(self) -> int:
        """Applier threads alive now."""
        return self._threads

    def schedule(self, batch: Batch) -> None:
        """Put ``batch`` in line; start a thread if the idle ones are fewer than the
        batches waiting. Both counts change together, under the lock, when a thread
        takes a batch, so a thread counted idle that is about to take an earlier batch
        is not mistaken for one free to take this one."""
        with self._lock:
            self._ready.put(batch)
            self._waiting += 1
            if self._waiting > self._idle and self._threads < self.size:
                self._threads += 1
                self._started += 1
                thread = threading.Thread(
                    target=self._run, name=f"{self.name}-{self._started}", daemon=True
                )
                thread.start()

    def _run(self) -> None:
        try:
            checked_until = 0.0
            while True:
                with self._lock:
                    self._idle += 1
                try:
                    wait = 0.0 if self.stopping.is_set() else IDLE_SECONDS
                    batch = self._ready.get(timeout=wait) if wait else self._ready.get_nowait()
                except queue.Empty:
                    with self._lock:
                        self._idle -= 1
                        if self._waiting == 0 or self.stopping.is_set():
                            self._threads -= 1
                            return
                    continue
                with self._lock:
                    self._idle -= 1
                    self._waiting -= 1
                if self.stopping.is_set():
                    continue  # left waiting: the monitor stores cursors as it stops
                if time.monotonic() >= checked_until:  # not per batch: a burst has many
                    close_old_connections()  # drops an unusable (or outlived) connection
                    checked_until = time.monotonic() + CONNECTION_CHECK_EVERY
                    _session()
                try:
                    batch.apply_batch()
                except Exception:  # noqa: BLE001 - an applier outlives any one failure
                    log.exception("monitor: applying events failed")
                if self._ready.empty() and pooled():
                    connection.close()  # back to the pool while nothing waits
        finally:
            connection.close()
