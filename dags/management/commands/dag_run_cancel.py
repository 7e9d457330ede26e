"""``manage.py dag_run_cancel RUN``: cancel a DAG run (id or unique id prefix)."""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from containers.actors import user_actor
from core.errors import DomainError
from dags.selectors import dag_run_get
from dags.services import dag_run_cancel


class Command(BaseCommand):
    help = "Cancel a DAG run: its queued and running nodes are deleted or stopped."

    def add_arguments(self, parser):
        parser.add_argument("run", help="The run's id, or a unique prefix of it.")
        parser.add_argument(
            "--as",
            dest="as_user",
            metavar="USERNAME",
            help="Who asks, recorded as user:<name> (default: your login name).",
        )

    def handle(self, *args, **options):
        try:
            run = dag_run_get(run_id=options["run"])
            run = dag_run_cancel(
                run_id=run.pk, actor=user_actor(options.get("as_user") or getpass.getuser())
            )
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        self.stdout.write(f"{run.id}: {run.status}")
