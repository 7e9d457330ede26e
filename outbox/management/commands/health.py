"""``manage.py health dispatcher|monitor|cluster QUEUE``: is that process of this host alive?

Built on the liveness marks the processes already renew every ``poll_interval``
(``outbox.liveness``): the dispatcher's, each cluster's pusher's (``outbox.broker``) and the
monitor's. Healthy when a mark of that process on this host (``--host``; every host with
``--any-host``) was renewed within ``--max-age`` seconds (default: the window in which
``outbox.liveness`` counts a process as alive, ten poll intervals). Prints one line and
exits 0 when healthy, 1 when not (stale, never beaten, or the marks cannot be read), 2
on a usage error. ``--ok-if-database-down`` passes when the marks cannot be read (a
liveness check restarts a process only on a mark seen stale, never for a database
outage). ``--wait`` polls until healthy or the time is up (a start check).

Used by the liveness and readiness probes of deploy/kubernetes/ (a Pod's hostname is its
name, so a probe sees its own container's process) and by the systemd units' start
checks (``ExecStartPost``).
"""

from __future__ import annotations

import socket
import sys
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from outbox import conf, liveness, registry
from outbox.selectors import mark_age

PROCESSES = ("dispatcher", "monitor", "cluster")
WAIT_STEP = 0.5  # seconds between two looks while --wait runs
CONNECT_TIMEOUT = 5  # seconds; a probe's own timeout is longer (deploy/kubernetes: 10 s)


class Command(BaseCommand):
    help = (
        "Exit 0 when the dispatcher, the monitor or a worker cluster (cluster QUEUE) of this "
        "host renewed its liveness mark within --max-age seconds; else print why and exit 1."
    )

    def add_arguments(self, parser):
        parser.add_argument("process", choices=PROCESSES, help="Which process to check.")
        parser.add_argument(
            "queue", nargs="?", help=f"For cluster: its queue ({', '.join(registry.queues())})."
        )
        parser.add_argument(
            "--max-age",
            type=float,
            help="Seconds a mark may be old and still healthy (default: ten poll intervals).",
        )
        where = parser.add_mutually_exclusive_group()
        where.add_argument("--host", help="The host whose process to check (default: this one).")
        where.add_argument(
            "--any-host", action="store_true", help="Healthy when any host's process is."
        )
        parser.add_argument(
            "--ok-if-database-down",
            action="store_true",
            help="Exit 0 when the marks cannot be read: only a mark seen stale fails "
            "(a liveness check: a database outage restarts no process).",
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=0.0,
            help="Look again until healthy, for at most this many seconds (default: look once).",
        )

    def handle(
        self, *args, process, queue, max_age, host, any_host, ok_if_database_down, wait, **options
    ):
        kind = self._kind(process, queue)
        if max_age is not None and max_age <= 0:
            raise CommandError("--max-age must be a positive number of seconds", returncode=2)
        if wait < 0:
            raise CommandError("--wait must be zero or more seconds", returncode=2)
        limit = max_age if max_age is not None else liveness.alive_window().total_seconds()
        where = None if any_host else (host or socket.gethostname())
        what = f"{process}{f' {queue}' if queue else ''} on {where or 'any host'}"
        deadline = time.monotonic() + wait
        while True:
            healthy, line = self._look(kind, where, limit, what)
            if healthy or time.monotonic() >= deadline:
                break
            time.sleep(WAIT_STEP)
        if healthy is None and ok_if_database_down:
            self.stdout.write(f"{line}; passing (--ok-if-database-down)")
            return
        if not healthy:
            self.stderr.write(line)
            sys.exit(1)
        self.stdout.write(line)

    def run_from_argv(self, argv):
        self._connect_directly()
        super().run_from_argv(argv)

    @staticmethod
    def _connect_directly() -> None:
        """Run as a process of its own (``manage.py health``, not ``call_command``): connect
        once, directly, within ``CONNECT_TIMEOUT``. Through the pool, a database that does
        not answer would hold the check for the pool's 30 s, and the probe would time out
        instead of knowing. The process ends with the check, and its settings with it."""
        if connection.vendor != "postgresql" or connection.connection is not None:
            return
        options = connection.settings_dict["OPTIONS"]
        options.pop("pool", None)
        options.setdefault("connect_timeout", CONNECT_TIMEOUT)

    @staticmethod
    def _kind(process: str, queue: str | None) -> str:
        """The marks' kind for ``process``; usage errors exit 2."""
        if process != "cluster":
            if queue:
                raise CommandError(f"{process} takes no queue (got {queue!r})", returncode=2)
            return liveness.DISPATCHER if process == "dispatcher" else liveness.MONITOR
        if queue not in registry.queues():
            known = ", ".join(registry.queues())
            raise CommandError(f"cluster needs its queue, one of: {known}", returncode=2)
        if not conf.database_broker():
            raise CommandError(
                "clusters renew a liveness mark only with gobrave's database broker "
                "(PostgreSQL and queue.broker: orm); with this broker there is none to check",
                returncode=2,
            )
        return liveness.cluster_kind(queue)

    @staticmethod
    def _look(kind: str, host: str | None, limit: float, what: str) -> tuple[bool | None, str]:
        """(healthy, the line to print); healthy is None when the marks cannot be read."""
        try:
            age = mark_age(prefix=liveness.mark_prefix(kind, host))
        except Exception as exc:  # noqa: BLE001 - a probe reports, it never crashes
            connection.close()  # a broken connection is not reused by the next look
            return None, f"unknown: {what}: cannot read the marks ({type(exc).__name__})"
        if age is None:
            return False, f"unhealthy: {what}: no liveness mark (never started here)"
        seconds = age.total_seconds()
        if seconds > limit:
            return False, f"unhealthy: {what}: last beat {seconds:.1f} s ago (max {limit:g} s)"
        return True, f"ok: {what}: last beat {seconds:.1f} s ago (max {limit:g} s)"
