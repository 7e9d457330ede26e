"""``manage.py dag_run_list [--status S]``: a table of DAG runs and their nodes' states."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from dags.selectors import dag_run_list
from dags.states import RunStatus


class Command(BaseCommand):
    help = "List DAG runs, newest first, with how many nodes are in each state."

    def add_arguments(self, parser):
        parser.add_argument("--status", action="append", default=[], help="Filter by status.")
        parser.add_argument("--limit", type=int, default=100)

    def handle(self, *args, **options):
        unknown = set(options["status"]) - set(RunStatus.values)
        if unknown:
            raise CommandError(f"unknown status {', '.join(sorted(unknown))}")
        rows = dag_run_list(statuses=options["status"]).prefetch_related("nodes")
        self.stdout.write(f"{'ID':36}  {'STATUS':10}  {'DAG':16}  {'OWNER':12}  NODES")
        for run in rows[: options["limit"]]:
            counts: dict[str, int] = {}
            for node in run.nodes.all():
                counts[node.status] = counts.get(node.status, 0) + 1
            nodes = " ".join(f"{status}={n}" for status, n in sorted(counts.items()))
            self.stdout.write(
                f"{run.id!s:36}  {run.status:10}  {run.template_name[:16]:16}  "
                f"{run.owner.get_username()[:12]:12}  {nodes}"
                + (f"  ({run.reason})" if run.reason else "")
            )
