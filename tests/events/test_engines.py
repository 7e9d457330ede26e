"""Engines' history in the events feed: health changes, cordons, enabled and capacity
changes, each with its actor and reason, written by the service that makes the change;
seen only by those who see the engines, kept after the runtime row is gone, exported.

The entries really commit (``committed``, ``tests/events/conftest.py``)."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from containers.execution.health import runtime_health_record
from containers.fleet.runtimes import WRITABLE, _record_changes, runtime_create, runtime_delete
from containers.models import Runtime, RuntimeEvent
from outbox.models import OutboxEvent
from tests.api.helpers import assert_error
from tests.events.feed import engine_event, event, settled
from tests.events.test_api import _all, _tail
from tests.factories import RuntimeFactory
from webhooks.kinds import DELIVERY_KIND, EventKind
from webhooks.models import WebhookEndpoint
from webhooks.services import webhook_endpoint_create


def _engine_entries(client, start: str, runtime: Runtime) -> list[dict]:
    entries = _all(client, f"/api/events/?cursor={start}&source=engine")
    return [e for e in entries if e["runtime_id"] == runtime.pk]


def _shown(entries: list[dict]) -> list[tuple]:
    keys = ("kind", "actor", "from_status", "to_status", "message")
    return [tuple(e[key] for key in keys) for e in entries]


@pytest.fixture
def endpoint(people, gobrave_config):
    """An operator's endpoint for engines' webhooks (on loopback, never connected to:
    nothing here delivers); removed afterwards (its deliveries go with ``committed``)."""
    gobrave_config(webhooks={"allow_http": True, "allow_private": True})
    made = webhook_endpoint_create(
        url="http://127.0.0.1:9/hook",
        event_kinds=[EventKind.ENGINE_UNREACHABLE, EventKind.ENGINE_REACHABLE],
    ).endpoint
    yield made
    WebhookEndpoint.objects.filter(pk=made.pk).delete()


def test_an_engine_going_away_and_back_is_in_the_feed_with_who_saw_it_and_why(people, endpoint):
    root = people["as_root"]
    runtime = RuntimeFactory(name="ev-far")
    start = _tail(root)
    runtime_health_record(runtime_id=runtime.pk, reachable=True, actor="monitor")  # first seen
    for _ in range(2):  # a repeated result is no change
        runtime_health_record(
            runtime_id=runtime.pk, reachable=False, error="connection refused", actor="monitor"
        )
    runtime_health_record(runtime_id=runtime.pk, reachable=True, actor="reconciler")
    settled()
    entries = _engine_entries(root, start, runtime)
    assert _shown(entries) == [
        ("engine.unreachable", "monitor", "reachable", "unreachable", "connection refused"),
        ("engine.reachable", "reconciler", "unreachable", "reachable", "the engine answers again"),
    ], entries
    assert {(e["runtime_name"], e["owner"], e["instance_id"]) for e in entries} == {
        ("ev-far", None, None)
    }
    assert [e["kind_display"] for e in entries] == ["engine unreachable", "engine reachable again"]
    # the webhook of each change came from the same call, in the same transaction
    deliveries = OutboxEvent.objects.filter(
        kind=DELIVERY_KIND, aggregate_id=f"webhook:{endpoint.pk}"
    ).order_by("id")
    sent = [(d.payload["type"], d.payload["data"]["runtime"]) for d in deliveries]
    assert sent == [("engine.unreachable", runtime.pk), ("engine.reachable", runtime.pk)]
    rows = RuntimeEvent.objects.filter(runtime_id=runtime.pk).order_by("id")
    with connection.cursor() as cursor:  # a row's xmin: its transaction's id (32 bits)
        cursor.execute(
            f"SELECT xmin::text::bigint FROM {OutboxEvent._meta.db_table} WHERE id = ANY(%s) "
            "ORDER BY id",
            [[d.id for d in deliveries]],
        )
        delivered_in = [row[0] for row in cursor.fetchall()]
    assert [r.txid % 2**32 for r in rows] == delivered_in, (list(rows), delivered_in)


def test_a_cordon_through_the_api_is_in_the_feed_with_its_caller_and_reason(people):
    root = people["as_root"]
    runtime = RuntimeFactory(name="ev-cordoned")
    start = _tail(root)
    url = f"/api/runtimes/{runtime.pk}"
    response = root.post(f"{url}/cordon/", {"reason": "kernel upgrade"}, format="json")
    assert response.status_code == 200, response.content
    assert root.post(f"{url}/cordon/", {}, format="json").status_code == 200  # no change
    assert root.post(f"{url}/uncordon/").status_code == 200  # no body: no reason
    settled()
    assert _shown(_engine_entries(root, start, runtime)) == [
        ("engine.cordoned", "user:ev-root", "open", "cordoned", "kernel upgrade"),
        ("engine.uncordoned", "user:ev-root", "cordoned", "open", ""),
    ]


def test_a_bad_reason_is_a_400_and_changes_nothing(people):
    root = people["as_root"]
    runtime = RuntimeFactory(name="ev-unchanged")
    url = f"/api/runtimes/{runtime.pk}"
    for path, body in (("cordon/", {"reason": "x" * 501}), ("cordon/", {"why": "typo"})):
        error = assert_error(root.post(f"{url}/{path}", body, format="json"), 400)
        assert set(error["details"]) == set(body), error
    bad = {"enabled": False, "reason": ["x"]}
    error = assert_error(root.patch(f"{url}/", bad, format="json"), 400)
    assert "reason" in error["details"], error
    row = Runtime.objects.get(pk=runtime.pk)
    assert (row.cordoned, row.enabled) == (False, True), vars(row)
    assert not RuntimeEvent.objects.filter(runtime_id=runtime.pk).exists()


def test_switching_off_and_capacity_through_the_api_are_in_the_feed(people):
    root = people["as_root"]
    runtime = RuntimeFactory(name="ev-resized")
    start = _tail(root)
    body = {"enabled": False, "max_containers": 3, "reason": "disk filling up"}
    response = root.patch(f"/api/runtimes/{runtime.pk}/", body, format="json")
    assert response.status_code == 200, response.content
    unchanged = {"max_containers": 3, "labels": {"engine": "fake", "node": "ev-resized"}}
    # the same values again: no entry
    assert root.patch(f"/api/runtimes/{runtime.pk}/", unchanged, format="json").status_code == 200
    settled()
    entries = _engine_entries(root, start, runtime)
    assert _shown(entries) == [
        ("engine.disabled", "user:ev-root", "enabled", "disabled", "disk filling up"),
        (
            "engine.capacity",
            "user:ev-root",
            "",
            "",
            "max_containers no limit → 3: disk filling up",
        ),
    ], entries
    assert entries[1]["data"] == {"max_containers": {"from": None, "to": 3}}


def test_owners_never_see_engine_entries(people):
    alice, root = people["as_alice"], people["as_root"]
    start = _tail(root)
    mine = event(owner=people["alice"], kind="transition")
    engine_event(kind="engine.unreachable", actor="monitor", message="refused")
    settled()
    hers = _all(alice, f"/api/events/?cursor={start}")
    assert [(e["source"], e["id"]) for e in hers] == [("instance", mine.id)], hers
    for query in ("source=engine", "kind=engine.unreachable", "actor=monitor"):
        assert _all(alice, f"/api/events/?cursor={start}&{query}") == [], query
    # an operator sees them, but not under an owner's filter (they have no owner)
    assert [e["source"] for e in _all(root, f"/api/events/?cursor={start}")] == [
        "instance",
        "engine",
    ]
    assert _all(root, f"/api/events/?cursor={start}&owner=ev-alice&source=engine") == []


def test_the_history_outlives_the_runtime_row_and_is_exported(people):
    root = people["as_root"]
    runtime = RuntimeFactory(name="ev-gone")
    start = _tail(root)
    since = (timezone.now() - dt.timedelta(seconds=1)).isoformat()
    url = f"/api/runtimes/{runtime.pk}/cordon/"
    response = root.post(url, {"reason": "retiring"}, format="json")
    assert response.status_code == 200, response.content
    runtime_id = runtime.pk
    Runtime.objects.filter(pk=runtime_id).delete()
    settled()
    [entry] = _all(root, f"/api/events/?cursor={start}&source=engine&actor=user:ev-root")
    assert (entry["runtime_id"], entry["runtime_name"], entry["message"]) == (
        runtime_id,
        "ev-gone",
        "retiring",
    ), entry
    out, err = io.StringIO(), io.StringIO()
    call_command("events_export", "--since", since, "--source", "engine", stdout=out, stderr=err)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["source"], x["id"]) for x in lines if x["runtime_id"] == runtime_id] == [
        ("engine", entry["id"])
    ], lines


def test_adding_changing_and_deleting_an_engine_are_in_the_feed_secrets_named_only(
    people, tmp_path
):
    root = people["as_root"]
    start = _tail(root)
    runtime_id = runtime_create(
        actor="user:ev-root", name="ev-added", driver="fake", base_url=f"fake://{tmp_path}/a"
    ).pk
    change = {"base_url": f"fake://{tmp_path}/b", "labels": {"zone": "b"}, "reason": "moved"}
    response = root.patch(f"/api/runtimes/{runtime_id}/", change, format="json")
    assert response.status_code == 200, response.content
    runtime_delete(runtime_id=runtime_id, actor="user:ev-root")
    settled()
    entries = [e for e in _all(root, f"/api/events/?cursor={start}&source=engine")]
    entries = [e for e in entries if e["runtime_id"] == runtime_id]
    assert _shown(entries) == [
        ("engine.added", "user:ev-root", "", "", f"fake engine at fake://{tmp_path}/a"),
        ("engine.changed", "user:ev-root", "", "", "base_url, labels changed: moved"),
        ("engine.deleted", "user:ev-root", "open", "", f"fake engine at fake://{tmp_path}/b"),
    ], entries
    assert entries[0]["data"]["tls_client_key"] == "", entries[0]
    assert entries[1]["data"] == {
        "base_url": {"from": f"fake://{tmp_path}/a", "to": f"fake://{tmp_path}/b"},
        "labels": {"from": {}, "to": {"zone": "b"}},
    }, entries[1]


def test_a_secret_setting_s_change_is_named_never_shown(db):
    runtime = Runtime(name="ev-tls", driver="docker", base_url="tcp://127.0.0.1:9")
    before = {field: getattr(runtime, field) for field in WRITABLE}
    runtime.tls_client_key = "/etc/gobrave/secret-key.pem"
    with transaction.atomic():
        runtime.save()
        _record_changes(runtime=runtime, before=before, actor="user:x", reason="")
    entry = RuntimeEvent.objects.get(runtime_id=runtime.pk, kind="engine.changed")
    assert (entry.message, entry.data) == (
        "tls_client_key changed",
        {"tls_client_key": {"from": "", "to": "(set)"}},
    ), (entry.message, entry.data)
