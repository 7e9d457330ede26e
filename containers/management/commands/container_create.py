"""``manage.py container_create --template T --user U [--wait]``: request a create."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from containers.management.commands._request import ConsoleCommand, short_id
from containers.requests.services import container_create_by_template
from containers.selectors import template_get
from core.errors import DomainError


class Command(ConsoleCommand):
    help = "Request a new container instance from a template, for a user."

    def add_arguments(self, parser):
        parser.add_argument("--template", required=True, help="Template id or name.")
        parser.add_argument("--user", required=True, help="The owner's username.")
        parser.add_argument("--name", help="A display name (default: template-xxxxxxxx).")
        parser.add_argument(
            "--env", action="append", default=[], metavar="NAME=VALUE", help="Env override."
        )
        self.add_request_arguments(parser)

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
                actor=self.actor(options),
            )
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        self.stdout.write(
            f"accepted {instance.id} ({instance.name}, short id {short_id(instance)}): "
            f"status {instance.status}"
        )
        self.wait_if_asked(options, instance=instance, action="create", after_id=0)
