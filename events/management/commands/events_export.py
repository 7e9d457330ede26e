"""``manage.py events_export --since T [--until T] [--format jsonl]``: the events feed as
JSON lines on stdout, streamed (``events.selectors.events_all``)."""

from __future__ import annotations

import datetime as dt
import json

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from events.api.serializers import entry_data
from events.selectors import SOURCES, Filters, events_all


def moment(text: str) -> dt.datetime:
    """An ISO 8601 date-time (UTC when it names no offset) or a date (its midnight, UTC)."""
    try:
        value = parse_datetime(text)
        if value is None and (day := parse_date(text)) is not None:
            value = dt.datetime.combine(day, dt.time())
    except ValueError:
        value = None
    if value is None:
        raise CommandError(f"not an ISO 8601 date or date-time: {text!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise CommandError(f"out of range: {text!r}") from None


class Command(BaseCommand):
    help = (
        "Write every history entry (instances, DAG runs and engines, all owners) created from "
        "--since (inclusive) to --until (exclusive) as JSON lines, in the feed's order. Streams: "
        "memory stays flat however many entries; each page of the feed is a few short queries."
    )

    def add_arguments(self, parser):
        parser.add_argument("--since", required=True, type=moment, help="ISO 8601, inclusive.")
        parser.add_argument("--until", type=moment, help="ISO 8601, exclusive (default: now).")
        parser.add_argument("--format", choices=["jsonl"], default="jsonl")
        parser.add_argument("--source", choices=SOURCES, help="Only one source's entries.")
        parser.add_argument("--batch", type=int, default=1000, help="Entries read per page.")

    def handle(self, *args, **options):
        if options["until"] is not None and options["until"] <= options["since"]:
            raise CommandError("--until must be after --since")
        if not 1 <= options["batch"] <= 10_000:
            raise CommandError("--batch must be between 1 and 10000")
        filters = Filters(
            created_after=options["since"],
            created_before=options["until"],
            source=options["source"] or "",
        )
        out = self.stdout
        written = 0
        for entry in events_all(filters=filters, batch=options["batch"]):
            out.write(json.dumps(entry_data(entry, viewer=False), separators=(",", ":")))
            written += 1
        self.stderr.write(f"{written} events written")
