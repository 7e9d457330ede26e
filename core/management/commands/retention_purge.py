"""``manage.py retention_purge``: run every retention purge now (``core.retention``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.retention import retention_run


class Command(BaseCommand):
    help = (
        "Delete what is past its age in config.yml (outbox.retention, the retention section), "
        "in batches, each its own short transaction; the dispatcher does the same every "
        "retention.interval."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, help="Rows per statement (retention.batch_size).")

    def handle(self, *args, **options):
        batch = options["batch"]
        if batch is not None and not 1 <= batch <= 100_000:
            raise CommandError("--batch must be between 1 and 100000")
        for name, deleted in sorted(retention_run(batch=batch).items()):
            self.stdout.write(f"{name}: {deleted} deleted")
