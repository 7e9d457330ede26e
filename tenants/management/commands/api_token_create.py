"""``manage.py api_token_create USER --name NAME [--days N]``: an API token for a user,
made by an operator (users make their own on ``/account/tokens/``). Prints the key, the
only time it is shown."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.errors import DomainError
from tenants.services import api_token_create


class Command(BaseCommand):
    help = "Make an API token for a user and print its key (shown this once, stored hashed)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="What it is for (default: cli).")
        parser.add_argument(
            "--days", type=int, default=0, help="It expires after this many days (0: never)."
        )

    def handle(self, *args, **options):
        days = options["days"]
        if days < 0:
            raise CommandError("--days is a number of days, 0 or more.")
        try:
            user = get_user_model().objects.get(username=options["username"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {options['username']!r}") from None
        expiry = timezone.now() + dt.timedelta(days=days) if days else None
        try:
            created = api_token_create(user=user, name=options["name"], expiry=expiry)
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        self.stdout.write(created.key)
