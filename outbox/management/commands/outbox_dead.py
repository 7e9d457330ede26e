"""``manage.py outbox_dead requeue|dismiss ID [ID ...]``: deal with dead letters from a
shell, as the admin's actions and ``POST /api/outbox/{id}/requeue|dismiss/`` do.

``requeue`` writes a new pending row with each dead row's request and resolves the dead
row (``outbox_dead_requeue``); ``dismiss`` only resolves it (``outbox_dead_resolve``).
Either sets ``resolved_at``, so retention deletes the dead row
``retention.dead_letters_resolved`` later. ``resolved_by`` is ``--as`` (default: the login
name). One line per id; a row that is not dead (or gone), or a requeue of a row
already resolved (dismissed or requeued before), is refused with the reason and
changes nothing; exits 1 if any was refused.
"""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from outbox.services import outbox_dead_requeue, outbox_dead_resolve


class Command(BaseCommand):
    help = "Requeue (run again as a new row) or dismiss dead outbox rows by id."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["requeue", "dismiss"])
        parser.add_argument("ids", nargs="+", type=int, metavar="ID")
        parser.add_argument("--as", dest="as_user", help="Who resolves them (default: login).")

    def handle(self, *args, **options):
        actor = options.get("as_user") or getpass.getuser()
        refused = 0
        for event_id in options["ids"]:
            try:
                if options["action"] == "requeue":
                    again = outbox_dead_requeue(event_id=event_id, actor=actor)
                    self.stdout.write(f"#{event_id}: requeued as #{again.id}")
                else:
                    outbox_dead_resolve(event_id=event_id, actor=actor)
                    self.stdout.write(f"#{event_id}: dismissed")
            except DomainError as exc:
                refused += 1
                self.stderr.write(f"#{event_id}: refused: {exc.message}")
        if refused:
            raise CommandError(f"{refused} of {len(options['ids'])} refused")
