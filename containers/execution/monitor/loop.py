"""The monitor's main loop (``Monitor``, what ``run_monitor`` runs): the followers
started, the liveness mark, the reconcile, the rechecks, the policies' pass, the
cursors stored, and the stop (see the package docstring, steps 1, 4 and 5)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from containers.actors import MONITOR, RECONCILER
from containers.counters import RequestStat
from containers.engines.base import EngineError
from containers.execution.appliers import Appliers
from containers.execution.heartbeat import Heartbeat
from containers.execution.images import template_images_refresh
from containers.execution.monitor.cursors import CURSOR_STORE_EVERY
from containers.execution.monitor.follower import Follower
from containers.execution.policies import policies_pass
from containers.execution.reconciler import distinct_engines, engine_key, reconcile
from containers.execution.sync import Sync, instance_sync
from containers.installation import installation_id
from containers.models import Runtime
from core.loops import StopOnSignal
from outbox import conf as outbox_conf
from outbox import liveness
from webhooks.services import webhook_limit_hits_notify

log = logging.getLogger(__name__)

BACKOFF_CAP = 30.0
LIMIT_NOTICE_EVERY = 10.0  # seconds between looks at the refusal counter (webhooks)
# An event that found a worker busy is looked at again soon, then less and less often
# (the worker usually finishes within tens of ms: a container that exits right after its
# start is then seen at once, not a second later)...
RECHECK_FIRST = 0.05
RECHECK_AFTER = 1.0  # ...at most this far apart...
RECHECK_FOR = 300.0  # ...for at most this long (the periodic reconcile covers the rest)
FOLLOWER_DB_SLOTS = 2  # followers writing their own rows (at a reconnect) at once


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


class Monitor(StopOnSignal):
    """The ``run_monitor`` process (see the package docstring). One per installation is
    enough; more are safe (every change is a compare under the instance's row lock)."""

    def __init__(
        self,
        *,
        installation: str | None = None,
        reconcile_interval: float | None = None,
        backoff_cap: float = BACKOFF_CAP,
        appliers: int | None = None,
    ) -> None:
        self.installation = installation or installation_id()
        self.reconcile_interval = float(reconcile_interval or _config()["reconcile_interval"])
        self.policy_interval = float(_config()["policies"]["interval"])
        self.backoff_cap = backoff_cap
        self.stopping = threading.Event()
        self.appliers = Appliers(int(appliers or _config()["monitor_appliers"]), self.stopping)
        self._db_slots = threading.BoundedSemaphore(FOLLOWER_DB_SLOTS)
        self.reconcile_wanted = threading.Event()
        self.followers: dict[tuple[str, str], Follower] = {}
        self._rechecks: dict[str, tuple[float, float, float]] = {}  # id -> (due, end, gap)
        self._rechecks_lock = threading.Lock()
        self.beat_name = liveness.beat_name(liveness.MONITOR)
        self.heartbeat = Heartbeat(stopping=self.stopping, on_return=self.engine_returned)

    def engine_returned(self, runtime: Runtime) -> None:
        """The heartbeat found an engine recorded unreachable answering again: reconcile
        now (its instances are settled from what it holds) and let its follower
        reconnect at once instead of at the end of its backoff."""
        self.reconcile_soon()
        follower = self.followers.get(engine_key(runtime))
        if follower is not None:
            follower.wake.set()

    @contextlib.contextmanager
    def db(self) -> Iterator[None]:
        """A follower's database work: one of ``FOLLOWER_DB_SLOTS`` at a time, and its
        connection closed (given back to the pool) as soon as it is done."""
        with self._db_slots:
            try:
                close_old_connections()
                yield
            finally:
                connection.close()

    def reconcile_soon(self) -> None:
        self.reconcile_wanted.set()

    def recheck(self, instance_id: str) -> None:
        """Look at an instance again shortly: its event arrived while a worker held its
        request (the worker may have inspected the engine just before the event), or
        while its state moved."""
        now = time.monotonic()
        with self._rechecks_lock:
            _, until, gap = self._rechecks.get(instance_id, (0.0, now + RECHECK_FOR, 0.0))
            gap = min(RECHECK_AFTER, gap * 2) if gap else RECHECK_FIRST
            self._rechecks[instance_id] = (now + gap, until, gap)

    def _pause(self) -> float:
        """Until the next recheck is due, between 10 ms and 100 ms."""
        with self._rechecks_lock:
            due = min((at for at, _, _ in self._rechecks.values()), default=None)
        if due is None:
            return 0.1
        return max(0.01, min(0.1, due - time.monotonic()))

    def _run_rechecks(self) -> None:
        now = time.monotonic()
        with self._rechecks_lock:
            due = [i for i, (at, _, _) in self._rechecks.items() if at <= now]
        for instance_id in due:
            if self.stopping.is_set():
                return
            with self._rechecks_lock:
                _, until, gap = self._rechecks.pop(instance_id)
            try:
                outcome = instance_sync(
                    instance_id=instance_id, actor=MONITOR, data={"source": "recheck"}
                )
            except EngineError as exc:  # the reconcile will look again
                log.warning("recheck of instance %s: engine unreachable (%s)", instance_id, exc)
                continue
            if outcome in (Sync.BUSY, Sync.RACED) and now < until:
                gap = min(RECHECK_AFTER, gap * 2)
                with self._rechecks_lock:
                    due_again = self._rechecks.get(instance_id, (now + gap,))[0]
                    self._rechecks[instance_id] = (due_again, until, gap)

    def run(self) -> None:
        log.info("monitor %s started (installation %s)", os.getpid(), self.installation)
        if _config()["refresh_image_status_on_start"]:
            self._step(self._refresh_images)
        self.heartbeat.start()
        next_reconcile = next_beat = next_notice = 0.0
        next_policies = time.monotonic() + self.policy_interval
        while not self.stopping.is_set():
            if time.monotonic() >= next_beat:  # a live process for a dispatcher's start
                self._step(self._liveness_beat)
                next_beat = time.monotonic() + float(outbox_conf.value("poll_interval"))
            if self.reconcile_wanted.is_set() or time.monotonic() >= next_reconcile:
                self.reconcile_wanted.clear()
                self._step(self._follow_enabled)
                self._step(self._reconcile)
                next_reconcile = time.monotonic() + self.reconcile_interval
            if time.monotonic() >= next_notice:  # a "limit hit" webhook, once a period
                self._step(self._limit_notices)
                next_notice = time.monotonic() + LIMIT_NOTICE_EVERY
            if time.monotonic() >= next_policies:
                self._step(self._policies)
                next_policies = time.monotonic() + self.policy_interval
            if self._rechecks:
                self._step(self._run_rechecks)
            self._step(self._cursors_store)
            self.stopping.wait(self._pause())
        for follower in self.followers.values():
            if follower.inbox.settle(timeout=60):  # let the events in hand finish
                with follower.step:
                    follower.cursor_store()
                continue
            log.warning("runtime %s: event still being applied after 60s", follower.name)
        connection.close()
        log.info("monitor %s stopped", os.getpid())

    def _limit_notices(self) -> None:
        """Creates refused (a full queue, a quota) roll their transactions back and cannot
        enqueue a webhook: the refusal counter is read instead, once per period
        (``webhooks.services.webhook_limit_hits_notify``, which sends at most one)."""
        webhook_limit_hits_notify(counter=RequestStat.CREATE_REFUSED)

    def _step(self, action) -> None:
        close_old_connections()
        try:
            action()
        except Exception:  # noqa: BLE001 - one failed step never ends the monitor
            log.exception("monitor step %s failed; retrying later", action.__name__)

    def _cursors_store(self) -> None:
        """Store each follower's cursor that moved over a second ago and is still not
        stored (its stream went quiet since): the stored cursor is never much behind."""
        for follower in self.followers.values():
            if follower.step.acquire(blocking=False):  # never while its cursor moves
                try:
                    follower.cursor_store(every=CURSOR_STORE_EVERY)
                finally:
                    follower.step.release()

    def _liveness_beat(self) -> None:
        liveness.process_beat(name=self.beat_name, kind=liveness.MONITOR)

    def _refresh_images(self) -> None:
        template_images_refresh()

    def _follow_enabled(self) -> None:
        """Start a follower for each engine of the enabled runtimes not yet followed."""
        for runtime in distinct_engines(Runtime.objects.filter(enabled=True)):
            key = engine_key(runtime)
            follower = self.followers.get(key)
            if follower is not None and follower.thread.is_alive():
                continue
            self.followers[key] = Follower(self, runtime)
            self.followers[key].thread.start()

    def _policies(self) -> None:
        report = policies_pass()
        log.debug("policies: %s", report)

    def _reconcile(self) -> None:
        report = reconcile(installation=self.installation, actor=RECONCILER)
        log.debug("reconcile: %s", report)
