"""``manage.py run_cluster QUEUE``: one django-q2 cluster under its watchdog."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from outbox import registry
from outbox.supervisor import Supervisor


class Command(BaseCommand):
    help = (
        "Run the django-q2 cluster of QUEUE (create or control) and restart it when it dies "
        "or wedges; its processes never outlive it. SIGTERM stops it."
    )

    def add_arguments(self, parser):
        parser.add_argument("queue", help="The worker queue: " + ", ".join(registry.queues()))
        parser.add_argument(
            "--check-interval", type=float, default=2.0, help="Seconds between health checks."
        )
        parser.add_argument(
            "--grace", type=float, default=10.0, help="Seconds SIGTERM may take before SIGKILL."
        )

    def handle(self, *args, queue: str, check_interval: float, grace: float, **options):
        if queue not in registry.queues():
            raise CommandError(f"unknown queue {queue!r} (known: {', '.join(registry.queues())})")
        supervisor = Supervisor(queue=queue, check_interval=check_interval, grace=grace)
        supervisor.install_signal_handlers()
        supervisor.run()
