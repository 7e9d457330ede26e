"""``manage.py reconcile [--once]``: compare every instance with its engine and repair."""

from __future__ import annotations

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from containers.execution.reconciler import reconcile


class Command(BaseCommand):
    help = (
        "Apply missed runtime transitions, fail instances stuck past start_timeout, backfill "
        "node names and report (or remove) orphan containers. Loops every "
        "reconcile_interval until SIGTERM (each pass compares the stopped instances a batch at a "
        "time), or runs one full pass with --once (every stopped instance too)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Run a single full pass and exit.")

    def handle(self, *args, once: bool = False, **options):
        if once:
            report = reconcile(stopped_batch=None)
            self.stdout.write(f"reconcile: {report}")
            if report.errors:
                raise CommandError(f"{len(report.errors)} runtime(s) could not be reconciled")
            return
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        signal.signal(signal.SIGINT, lambda *_: stopping.set())
        interval = float(settings.GOBRAVE["container"]["reconcile_interval"])
        while not stopping.is_set():
            close_old_connections()
            self.stdout.write(f"reconcile: {reconcile()}")
            stopping.wait(interval)
