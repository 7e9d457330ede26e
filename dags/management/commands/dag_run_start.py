"""``manage.py dag_run_start --template D --user U``: start a run of a DAG template."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from containers.actors import user_actor
from core.errors import DomainError
from dags.selectors import dag_template_get
from dags.services import dag_run_start


class Command(BaseCommand):
    help = (
        "Start a run of a DAG template for a user (who must be allowed to use all its templates)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--template", required=True, help="DAG template id or name.")
        parser.add_argument("--user", required=True, help="The owner's username.")

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
