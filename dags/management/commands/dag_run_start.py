"""``manage.py dag_run_start --template D --user U [--wait]``: start a run of a DAG template.

``--wait`` follows the run until it ends, printing each transition of the run and of its
nodes from the run's history, and exits non-zero unless it succeeded (as
``container_create --wait`` does for an instance).
"""

from __future__ import annotations

import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from containers.actors import user_actor
from containers.management.commands._request import ConsoleCommand, history_line
from core.errors import DomainError
from dags.history import dag_event_kind_display
from dags.selectors import dag_template_get, run_history_after, run_state
from dags.services import dag_run_start
from dags.states import RUN_FINISHED, RunStatus


class Command(ConsoleCommand):
    help = (
        "Start a run of a DAG template for a user (who must be allowed to use all its templates)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--template", required=True, help="DAG template id or name.")
        parser.add_argument("--user", required=True, help="The owner's username.")
        parser.add_argument(
            "--wait",
            action="store_true",
            help="Follow the run until it ends, printing each transition of it and its nodes; "
            "exit 1 unless it succeeded.",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=3600.0,
            metavar="SECONDS",
            help="With --wait: give up (exit 1) after this long (default 3600).",
        )

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"refused: no user {options['user']!r}")
        try:
            dag = dag_template_get(ref=options["template"], user=user)
            run = dag_run_start(dag=dag, owner=user, actor=user_actor(user))
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        self.stdout.write(f"started {run.id} ({dag.name}, {len(run.graph)} nodes): {run.status}")
        if options["wait"]:
            self.follow(run_id=run.id, timeout=options["timeout"])

    def follow(self, *, run_id: uuid.UUID, timeout: float) -> None:
        """Print the run's new history until it ends; ``CommandError`` unless it ends
        ``succeeded`` within ``timeout`` seconds."""
        run = self.follow_history(
            state=lambda: run_state(run_id=run_id),
            history_after=lambda after: run_history_after(run_id=run_id, after_id=after),
            line=_history_line,
            rests=lambda run: run is None or run.status in RUN_FINISHED,
            still=lambda run: f"run {run_id}: still {run.status} after {timeout:g} s",
            timeout=timeout,
        )
        if run is None:
            raise CommandError(f"run {run_id}: the run was deleted")
        if run.status != RunStatus.SUCCEEDED:
            reason = f": {run.reason}" if run.reason else ""
            raise CommandError(f"run {run_id} ended {run.status}{reason}")
        self.stdout.write(f"run {run_id}: succeeded")


def _history_line(event) -> str:
    subject = f"{event.node or 'run'}: "
    return history_line(event, words=dag_event_kind_display, subject=subject, width=24)
