"""Run one django-q2 cluster under a watchdog that needs no human (``run_cluster``).

A cluster can die (its main process killed) or wedge: django-q2's workers share one
``multiprocessing.Queue``, and a worker killed while it waits in ``read()`` on its pipe
takes the queue's read lock with it; every worker then lives and none ever gets a task,
and SIGTERM to the main never completes. Leases keep the rows safe, but nothing moves.

The supervisor, one per cluster:
1. Starts ``manage.py qcluster`` for its queue as a child in a process group of its own
   (and every process of the cluster dies with its parent: ``outbox.forking``).
2. Every ``check_interval``: a child that exited is dead; a queue whose work no worker
   takes (``outbox.selectors.handoff_stalled``: rows claimed over ``handoff_timeout`` ago
   and never begun, none begun since, none running) is wedged. Each wedge restart in a
   row doubles that window (up to 8x), until the new cluster has begun a row.
3. A dead or wedged cluster: kill its whole process group (SIGKILL: a wedged one cannot
   stop), make the claims it never began due at once (``relay.claims_release_unstarted``,
   so they go to the new cluster now rather than when their lease runs out), count the
   restart, and start a new cluster. Restarts back off (1, 2, 4 … 30 s) while a cluster
   keeps dying at once.
4. SIGTERM/SIGINT: SIGTERM to the cluster's main pid (django-q2 then stops its workers),
   SIGKILL to the group after ``grace`` seconds, then exit 0.
Every transition is logged with the cluster's pid; restarts are counted in the relay's
counters (``cluster_restarted``), shown on the dashboard and ``/metrics``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from core.counters import counter_bump
from core.loops import StopOnSignal
from outbox import relay, selectors
from outbox.counters import RelayStat

log = logging.getLogger(__name__)


@dataclass
class Supervisor(StopOnSignal):
    """One queue's cluster, kept alive. ``run()`` blocks until SIGTERM."""

    queue: str
    check_interval: float = 2.0
    grace: float = 10.0
    command: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    child: subprocess.Popen | None = None
    restarts: int = 0
    # Wedge restarts in a row double the window (up to 8x handoff_timeout), so a cluster
    # that merely starts slowly on a loaded host is not restarted again and again.
    patience: float = 1.0
    started_at: dt.datetime | None = None  # the database's clock when the cluster started

    def __post_init__(self) -> None:
        if not self.command:
            manage = Path(settings.BASE_DIR) / "manage.py"
            self.command = [sys.executable, str(manage), "qcluster"]

    # --- the cluster process ---------------------------------------------------------------

    def start(self) -> None:
        env = {
            **os.environ,
            "Q_CLUSTER_NAME": self.queue,
            "GOBRAVE_APP_NAME": f"gobrave-{self.queue}-cluster",
            # The cluster dies with this supervisor, however it dies (outbox.forking).
            "GOBRAVE_DIE_WITH_PARENT": str(os.getpid()),
        }
        with contextlib.suppress(Exception):  # the database may be down: no mark then
            self.started_at = selectors.database_now()
        self.child = subprocess.Popen(self.command, env=env, start_new_session=True)
        log.info("cluster %s started (pid %s)", self.queue, self.child.pid)

    def kill(self) -> None:
        """SIGKILL the cluster's whole process group and reap its main."""
        if self.child is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.child.wait(timeout=30)

    def shutdown(self) -> None:
        """SIGTERM the main pid; SIGKILL the group after ``grace`` seconds."""
        if self.child is None:
            return
        if self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signal.SIGTERM)
            try:
                self.child.wait(timeout=self.grace)
            except subprocess.TimeoutExpired:
                log.warning("cluster %s did not stop in %ss; killing it", self.queue, self.grace)
        self.kill()  # whatever is left of the group (a main that exited leaves none)

    def restart(self, reason: str) -> None:
        pid = self.child.pid if self.child else None
        log.warning("cluster %s (pid %s) %s; restarting it", self.queue, pid, reason)
        self.kill()
        released = relay.claims_release_unstarted(self.queue)
        if released:
            log.warning("cluster %s: %s claims it never began are due again", self.queue, released)
        counter_bump(RelayStat.CLUSTER_RESTARTED)
        self.restarts += 1
        self.start()

    # --- the watchdog ------------------------------------------------------------------------

    def check(self) -> str | None:
        """Why the cluster must be restarted now, or None while it is healthy."""
        if self.child is None or self.child.poll() is not None:
            code = None if self.child is None else self.child.returncode
            return f"exited with {code}"
        close_old_connections()
        window = settings.OUTBOX["handoff_timeout"] * self.patience
        stalled = selectors.handoff_stalled(queue=self.queue, seconds=window)
        if stalled:
            return f"is wedged: {stalled} claimed rows not begun by any worker within {window:g}s"
        return None

    def run(self) -> int:
        self.start()
        backoff = 1.0
        started = time.monotonic()
        while not self.stopping.wait(self.check_interval):
            try:
                reason = self.check()
            except Exception:  # noqa: BLE001 - the watchdog outlives a failed check (DB down)
                log.warning("cluster %s: health check failed", self.queue, exc_info=True)
                continue
            if reason is None:
                if time.monotonic() - started > 60:
                    backoff = 1.0
                if self.patience > 1 and selectors.queue_began_since(
                    queue=self.queue, since=self.started_at
                ):
                    self.patience = 1.0  # the new cluster took work: it is not slow to start
                continue
            if reason.startswith("is wedged"):
                self.patience = min(8.0, self.patience * 2)
            if time.monotonic() - started < 10:
                # Dying at once again and again (a bad deploy): do not spin.
                self.stopping.wait(backoff)
                backoff = min(30.0, backoff * 2)
            if self.stopping.is_set():
                break
            try:
                self.restart(reason)
            except Exception:  # noqa: BLE001 - e.g. the database is down: start anyway
                log.exception("cluster %s: restart bookkeeping failed", self.queue)
                if self.child is None or self.child.poll() is not None:
                    self.start()
            started = time.monotonic()
        self.shutdown()
        log.info("cluster %s supervisor stopped", self.queue)
        return 0
