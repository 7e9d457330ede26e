"""``GET /api/events/``: the audit trail as one feed; its filters, who sees what
(also the history of deleted instances), its cursor, and what it costs.

The entries really commit (``committed``, ``tests/events/conftest.py``): the feed
serves only entries of transactions that have ended."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from containers.models import ContainerEvent, RuntimeEvent
from containers.requests.lifecycle import record
from dags.models import DagEvent
from events.selectors import Filters, Position, _page
from tests.api.helpers import assert_error
from tests.events.feed import DEADLINE, engine_event, event, settled
from tests.factories import InstanceFactory, UserFactory
from tests.plans import plan_of


def _pages(client, url: str) -> list[dict]:
    """Every entry of ``url``, following ``next``, in one pass."""
    found = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        found += body["results"]
        url = body["next"]
    return found


def _all(client, url: str) -> list[dict]:
    """Every entry of ``url`` (following ``next``) once two passes agree.

    A page's horizon may be read lower than a moment before, never higher than it
    should: a transaction of another database (a parallel test's) that ends between the
    horizon statement's snapshot and its read of ``pg_stat_activity`` counts as this
    database's for that read. Its entries are then served late, never lost: a pass cut
    short is followed by a longer one, and two passes cut short alike would need that
    to happen twice at the same point."""
    end = time.monotonic() + DEADLINE
    last = _pages(client, url)
    while True:
        found = _pages(client, url)
        if found == last or time.monotonic() > end:
            return found
        last = found


def _tail(client) -> str:
    """The feed's position after everything already there (where this test's start)."""
    settled()
    url, cursor = "/api/events/?limit=500", None
    while url:
        body = client.get(url).json()
        url, cursor = body["next"], body["cursor"]
    return cursor


def _start(made) -> Position:
    """The position just before ``made``."""
    return Position(made_txid(made), -1, 0)


def made_txid(made) -> int:
    return type(made).objects.filter(id=made.id).values_list("txid", flat=True).get()


def _keys(entries: list[dict]) -> list[tuple[str, int]]:
    return [(entry["source"], entry["id"]) for entry in entries]


def test_each_filter_keeps_exactly_its_entries(people):
    alice, mallory, root = people["alice"], people["mallory"], people["as_root"]
    start = _tail(root)
    mine, theirs, run = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    old = timezone.now() - dt.timedelta(days=3)
    a = event(owner=alice, instance_id=mine, kind="ContainerStopRequest", actor="user:ev-alice")
    b = event(owner=alice, instance_id=mine, actor="policy", created_at=old)
    c = event(owner=mallory, instance_id=theirs, actor="worker")
    d = DagEvent.objects.create(run_id=run, owner=alice, kind="transition", actor="dag-runner")
    e = engine_event(kind="engine.unreachable", actor="monitor")
    settled()
    every = _keys(_all(root, f"/api/events/?cursor={start}"))
    assert every == [
        ("instance", a.id),
        ("instance", b.id),
        ("instance", c.id),
        ("dag_run", d.id),
        ("engine", e.id),
    ]
    day = (timezone.now() - dt.timedelta(days=1)).isoformat().replace("+", "%2B")
    cases = {
        f"instance={mine}": [("instance", a.id), ("instance", b.id)],
        f"dag_run={run}": [("dag_run", d.id)],
        "owner=ev-alice": [("instance", a.id), ("instance", b.id), ("dag_run", d.id)],
        f"owner={mallory.pk}": [("instance", c.id)],
        "owner=nobody-by-that-name": [],
        "kind=ContainerStopRequest": [("instance", a.id)],
        "actor=policy": [("instance", b.id)],
        "source=dag_run": [("dag_run", d.id)],
        "source=engine": [("engine", e.id)],
        "kind=engine.unreachable": [("engine", e.id)],
        "actor=monitor": [("engine", e.id)],
        f"created_before={day}": [("instance", b.id)],
        f"created_after={day}&owner=ev-alice": [("instance", a.id), ("dag_run", d.id)],
    }
    for query, expected in cases.items():
        assert _keys(_all(root, f"/api/events/?cursor={start}&{query}")) == expected, query


def test_an_owner_reads_only_their_own_entries_also_of_deleted_instances(people):
    alice, mallory = people["alice"], people["mallory"]
    kept = InstanceFactory(owner=alice, name="kept")
    gone = InstanceFactory(owner=alice, name="gone")
    with transaction.atomic():  # recorded as the services record (a prepared INSERT)
        record(kept, kind="transition", actor="worker", to_status="creating")
        record(gone, kind="ContainerDeleted", actor="worker", message="deleted")
    gone_id = gone.id
    gone.delete()  # the history stays, with its owner
    event(owner=mallory, instance_name="not-hers")
    event(owner=None, kind="orphan", actor="reconciler")  # of no instance: operators only
    DagEvent.objects.create(run_id=uuid.uuid4(), owner=alice, kind="transition", actor="x")
    DagEvent.objects.create(run_id=uuid.uuid4(), owner=mallory, kind="transition", actor="x")
    settled()
    hers = _all(people["as_alice"], "/api/events/")
    assert [(e["source"], e["instance_name"], e["owner"]) for e in hers] == [
        ("instance", "kept", "ev-alice"),
        ("instance", "gone", "ev-alice"),
        ("dag_run", None, "ev-alice"),
    ]
    assert hers[1]["instance_id"] == str(gone_id)
    assert _all(people["as_alice"], "/api/events/?owner=ev-mallory") == []
    deleted = _all(people["as_alice"], f"/api/events/?instance={gone_id}")
    assert [e["kind"] for e in deleted] == ["ContainerDeleted"]
    assert [e["owner"] for e in _all(people["as_mallory"], "/api/events/")] == ["ev-mallory"] * 2
    kinds = [e["kind"] for e in _all(people["as_root"], "/api/events/?actor=reconciler")]
    assert "orphan" in kinds


def _served(client, url: str) -> dict:
    """The page at ``url`` once it serves something and two reads agree (see ``_all``:
    a read's horizon may be lower than a moment before; held-back entries come late,
    never lost)."""
    end = time.monotonic() + DEADLINE
    last = None
    while True:
        body = client.get(url).json()
        if (body["results"] and body == last) or time.monotonic() > end:
            return body
        last = body
        time.sleep(0.02)


def test_a_reader_following_the_cursor_later_gets_what_was_committed_since(people):
    alice, root = people["alice"], people["as_root"]
    start = _tail(root)
    first = [event(owner=alice) for _ in range(3)]
    settled()
    body = _served(root, f"/api/events/?cursor={start}&limit=2")
    assert [e["id"] for e in body["results"]] == [first[0].id, first[1].id] and body["next"]
    body = _served(root, body["next"])
    assert [e["id"] for e in body["results"]] == [first[2].id]
    assert body["next"] is None  # nothing more now; the cursor says where to ask later
    later = [event(owner=alice) for _ in range(2)]
    settled()
    body = _served(root, f"/api/events/?cursor={body['cursor']}")
    assert [e["id"] for e in body["results"]] == [e.id for e in later]


def test_an_entry_whose_transaction_is_still_open_holds_later_ones_back(people):
    """Ids are taken at insert, not at commit: an entry committed after a higher-numbered
    one is served before it, never skipped."""
    alice, root = people["alice"], people["as_root"]
    start = _tail(root)
    inserted, release, made = threading.Event(), threading.Event(), {}

    def slow_writer():
        try:
            with transaction.atomic():
                made["slow"] = event(owner=alice, kind="slow")
                inserted.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    try:
        assert inserted.wait(30)
        fast = event(owner=alice, kind="fast")  # a higher id, committed first
        assert fast.id > made["slow"].id
        assert ContainerEvent.objects.filter(id=fast.id).exists()  # an id reader sees it
        body = root.get(f"/api/events/?cursor={start}").json()
        assert body["results"] == [], body  # ... and would have passed 'slow' for good
    finally:
        release.set()
        thread.join(30)
    settled()
    body = _served(root, f"/api/events/?cursor={body['cursor']}")
    assert [e["kind"] for e in body["results"]] == ["slow", "fast"], body


@pytest.mark.parametrize(
    "query, parameter",
    [
        ("cursor=not-a-cursor", "cursor"),
        ("cursor=WzEsMiwzLDRd", "cursor"),  # [1,2,3,4]
        ("cursor=WzEsOSwzXQ", "cursor"),  # [1,9,3]: no such source
        ("cursor=" + "A" * 300, "cursor"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("instance=12", "instance"),
        ("created_after=yesterday", "created_after"),
        ("created_after=0001-01-01T00:00:00%2B05:00", "created_after"),
        ("source=engines", "source"),
        ("ownr=ev-alice", "ownr"),
        ("kind=" + "k" * 65, "kind"),
        ("kind=a%00b", "kind"),  # PostgreSQL cannot compare a NUL: refused before it
        ("owner=%00", "owner"),
        (f"instance={uuid.UUID(int=1)}&dag_run={uuid.UUID(int=2)}", "dag_run"),
    ],
    ids=lambda value: value if len(value) < 40 else value[:37] + "...",
)
def test_bad_input_is_a_400_naming_the_parameter(people, query, parameter):
    error = assert_error(people["as_alice"].get(f"/api/events/?{query}"), 400)
    assert parameter in error["details"], error


def test_anonymous_callers_are_refused(committed):
    from rest_framework.test import APIClient

    assert APIClient().get("/api/events/").status_code == 401


# Every request: the token (with its user) and the caller's permissions (tenants.backends).
AUTH = 2


@pytest.mark.parametrize("who", ["alice", "root"])
def test_a_page_costs_the_same_queries_for_3_entries_as_for_30(people, who):
    client, alice = people[f"as_{who}"], people["alice"]
    owners = [alice, *UserFactory.create_batch(2)]
    start = _tail(people["as_root"])

    def make(n):
        for i in range(n):
            event(owner=owners[i % 3] if who == "root" else alice)
            DagEvent.objects.create(run_id=uuid.uuid4(), owner=alice, kind="t", actor="x")
        settled()

    counts = []
    for made, shown in ((3, 3), (27, 30)):
        make(made)
        with CaptureQueriesContext(connection) as captured:
            body = client.get(f"/api/events/?cursor={start}&limit=100").json()
        counts.append(len(captured))
        assert len(body["results"]) == 2 * shown, body
        sql = "\n".join(q["sql"] for q in captured.captured_queries)
        assert "COUNT(" not in sql.upper() and " OFFSET " not in sql.upper(), sql
    # the token and permissions, the horizon, one statement per table (owner joined):
    # root reads the engines' too
    tables = 3 if who == "root" else 2
    assert counts == [AUTH + 1 + tables] * 2, counts


def test_every_filter_reads_its_index_in_the_feeds_order(committed):
    # The planner's estimates follow the table's statistics (autovacuum may analyze a
    # table of three rows at any time, and a sort of one row then costs nothing):
    # ``plan_of`` prices scans and sorts out, so the plan shows whether an index serves
    # the filter in the feed's order.
    for table, column, value, index in [
        (ContainerEvent, "owner_id", "1", "event_feed_owner"),
        (ContainerEvent, "instance_id", f"'{uuid.uuid4()}'", "event_feed_instance"),
        (ContainerEvent, "kind", "'x'", "event_feed_kind"),
        (ContainerEvent, "actor", "'x'", "event_feed_actor"),
        (RuntimeEvent, "kind", "'x'", "rtevent_feed_kind"),
        (RuntimeEvent, "actor", "'x'", "rtevent_feed_actor"),
    ]:
        plan = plan_of(
            f"SELECT id FROM {table._meta.db_table} "
            f"WHERE {column} = {value} AND txid > 0 ORDER BY txid, id LIMIT 51"
        )
        assert index in plan and "Sort" not in plan, plan


@pytest.mark.django_db
def test_nothing_is_served_from_inside_a_transaction_that_wrote_it():
    """A reader whose own transaction wrote is itself the oldest one running: what it
    wrote is served once it commits, never before."""
    made = event(kind="mine")
    page = _page(
        scope={"instance": None, "dag_run": None}, filters=Filters(), after=_start(made), limit=10
    )
    assert page.entries == [] and not page.more
