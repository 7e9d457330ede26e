"""``manage.py container_list [--status S]``: a table of instances."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from containers.selectors import instance_list
from containers.states import Status


class Command(BaseCommand):
    help = "List container instances, newest first."

    def add_arguments(self, parser):
        parser.add_argument("--status", action="append", default=[], help="Filter by status.")
        parser.add_argument("--limit", type=int, default=100)

    def handle(self, *args, **options):
        unknown = set(options["status"]) - set(Status.values)
        if unknown:
            raise CommandError(f"unknown status {', '.join(sorted(unknown))}")
        rows = instance_list(statuses=options["status"])[: options["limit"]]
        self.stdout.write(f"{'ID':36}  {'STATUS':14}  {'TEMPLATE':16}  {'OWNER':12}  NAME")
        for row in rows:
            self.stdout.write(
                f"{row.id!s:36}  {row.status:14}  {row.template.name[:16]:16}  "
                f"{row.owner.get_username()[:12]:12}  {row.name}"
            )
