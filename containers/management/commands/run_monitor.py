"""``manage.py run_monitor``: follow the engines' events and reconcile (long-running)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from containers.execution.monitor import Monitor


class Command(BaseCommand):
    help = (
        "Follow every enabled runtime's container events, apply them to instances and "
        "reconcile every reconcile_interval. SIGTERM finishes the current step and exits 0."
    )

    def handle(self, *args, **options):
        monitor = Monitor()
        monitor.install_signal_handlers()
        monitor.run()
