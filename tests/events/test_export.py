"""``manage.py events_export``: every owner's entries between --since and --until as
JSON lines, in the feed's order; bad arguments refused with a clear error."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from dags.models import DagEvent
from tests.events.feed import event, settled


def _export(*args: str) -> list[dict]:
    out, err = io.StringIO(), io.StringIO()
    call_command("events_export", *args, stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    assert err.getvalue().strip() == f"{len(lines)} events written"
    return [json.loads(line) for line in lines]


def test_the_export_writes_every_owners_entries_in_the_range_as_json_lines(people):
    now = timezone.now()
    before = event(owner=people["alice"], created_at=now - dt.timedelta(hours=3))
    inside = [
        event(owner=people["alice"], kind="a", created_at=now - dt.timedelta(hours=1)),
        event(owner=people["mallory"], kind="b", created_at=now - dt.timedelta(hours=1)),
        event(owner=None, kind="orphan", created_at=now - dt.timedelta(minutes=30)),
    ]
    run = DagEvent.objects.create(run_id=uuid.uuid4(), owner=people["alice"], kind="t", actor="x")
    settled()
    since = (now - dt.timedelta(hours=2)).isoformat()
    lines = _export("--since", since, "--format", "jsonl", "--batch", "2")
    first = {"instance": before.id, "dag_run": run.id}  # this test's entries
    mine = [(line["source"], line["id"]) for line in lines if line["id"] >= first[line["source"]]]
    assert mine == [*(("instance", e.id) for e in inside), ("dag_run", run.id)]
    assert [line["owner"] for line in lines[-4:]] == ["ev-alice", "ev-mallory", None, "ev-alice"]
    until = (now - dt.timedelta(minutes=45)).isoformat()
    ranged = _export("--since", since, "--until", until, "--source", "instance")
    assert [line["id"] for line in ranged if line["id"] >= before.id] == [e.id for e in inside[:2]]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--since", "yesterday"], "not an ISO 8601"),
        (["--since", "2026-02-01", "--until", "2026-01-01"], "--until must be after"),
        (["--since", "2026-01-01", "--batch", "0"], "--batch"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(committed, args, words):
    with pytest.raises(CommandError, match=words):
        call_command("events_export", *args, stdout=io.StringIO(), stderr=io.StringIO())
