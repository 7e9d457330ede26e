"""``manage.py container_create --template T --user U``: request a create."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from containers.selectors import template_get
from containers.services import container_create_by_template
from core.errors import DomainError


class Command(BaseCommand):
    help = "Request a new container instance from a template, for a user."

    def add_arguments(self, parser):
        parser.add_argument("--template", required=True, help="Template id or name.")
        parser.add_argument("--user", required=True, help="The owner's username.")
        parser.add_argument("--name", help="A display name (default: template-xxxxxxxx).")
        parser.add_argument(
            "--env", action="append", default=[], metavar="NAME=VALUE", help="Env override."
        )

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"refused: no user {options['user']!r}")
        env = {}
        for item in options["env"]:
            name, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"refused: --env {item!r} must be NAME=VALUE")
            env[name] = value
        try:
            template = template_get(ref=options["template"])
            instance = container_create_by_template(
                template=template,
                owner=user,
                name=options.get("name"),
                env=env or None,
                actor=f"cli:{user.get_username()}",
            )
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        self.stdout.write(f"accepted {instance.id} ({instance.name}): status {instance.status}")
