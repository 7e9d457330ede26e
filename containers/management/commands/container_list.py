"""``manage.py container_list [--status S]``: a table of instances."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.timesince import timesince

from containers.management.commands._request import ConsoleCommand, short_id
from containers.selectors import instance_list
from containers.states import Status


class Command(ConsoleCommand):
    help = "List container instances, newest first (ID is the short id the commands accept)."

    def add_arguments(self, parser):
        parser.add_argument("--status", action="append", default=[], help="Filter by status.")
        parser.add_argument("--limit", type=int, default=100)

    def handle(self, *args, **options):
        unknown = set(options["status"]) - set(Status.values)
        if unknown:
            raise CommandError(f"unknown status {', '.join(sorted(unknown))}")
        rows = instance_list(statuses=options["status"])[: options["limit"]]
        now = timezone.now()
        self.stdout.write(
            f"{'ID':8}  {'STATUS':14}  {'CHANGED':14}  {'TEMPLATE':16}  {'OWNER':12}  NAME"
        )
        for row in rows:
            age = timesince(row.status_changed_at, now, depth=1).replace("\xa0", " ")
            self.stdout.write(
                f"{short_id(row):8}  {row.status:14}  {age + ' ago':14}  "
                f"{row.template.name[:16]:16}  {row.owner.get_username()[:12]:12}  {row.name}"
            )
