"""``manage.py run_dispatcher``: the long-running outbox dispatcher."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from core import counters
from outbox.dispatcher import Dispatcher


class Command(BaseCommand):
    help = "Claim due outbox rows and hand them to the django-q2 clusters. SIGTERM stops it."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Run a single cycle and exit.")

    def handle(self, *args, once: bool = False, **options):
        dispatcher = Dispatcher()
        if once:
            handed = dispatcher.cycle()
            self.stdout.write(f"handed {handed} outbox rows to workers")
            return
        dispatcher.install_signal_handlers()
        counters.counters_buffer_start()  # this process's claims count once a second
        dispatcher.run()
