"""Shared plumbing for the request commands: domain errors become a message and exit 1."""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError


class RequestCommand(BaseCommand):
    action = ""

    def add_arguments(self, parser):
        parser.add_argument("instance", help="The instance's uuid.")

    def request(self, **kwargs):  # pragma: no cover - overridden
        raise NotImplementedError

    def handle(self, *args, **options):
        actor = f"cli:{getpass.getuser()}"
        try:
            instance = self.request(instance_id=options["instance"], actor=actor)
        except DomainError as exc:
            raise CommandError(f"refused: {exc.message}") from None
        verb = "accepted" if instance.queued else "already under way (nothing queued)"
        self.stdout.write(f"{self.action} {instance.id}: {verb}; status {instance.status}")
