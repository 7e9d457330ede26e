"""/api/runtimes/, /api/outbox/ and /api/queue/: the operator's endpoints."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from core.models import Counter
from outbox.models import OutboxEvent
from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db


def _row(status="pending", **fields):
    return OutboxEvent.objects.create(
        kind=fields.pop("kind", "ContainerCreateRequest"),
        queue=fields.pop("queue", "create"),
        aggregate_id=fields.pop("aggregate_id", "a"),
        status=status,
        available_at=fields.pop("available_at", timezone.now()),
        **fields,
    )


# --- runtimes -------------------------------------------------------------------------------


def test_staff_lists_and_reads_runtimes(staff, fake_runtime):
    body = staff.get("/api/runtimes/").json()
    assert "fake" in [row["name"] for row in body["results"]]
    detail = staff.get(f"/api/runtimes/{fake_runtime.pk}/").json()
    assert (detail["driver"], detail["labels"]["engine"]) == ("fake", "fake")


def test_unknown_runtime_is_404(staff):
    assert_error(staff.get("/api/runtimes/987654/"), 404, "not_found")
    assert_error(staff.get("/api/runtimes/local/"), 404, "not_found")


# --- outbox ---------------------------------------------------------------------------------


def test_outbox_lists_newest_first_and_filters(staff):
    first = _row("sent", kind="ContainerCreateRequest", aggregate_id="x")
    second = _row("dead", kind="ContainerStopRequest", queue="control", aggregate_id="y")
    third = _row("pending", kind="ContainerStopRequest", queue="control", aggregate_id="x")

    def ids(query=""):
        return [row["id"] for row in staff.get(f"/api/outbox/?{query}").json()["results"]]

    assert ids() == [third.id, second.id, first.id]
    assert ids("ordering=id") == [first.id, second.id, third.id]
    assert ids("status=dead") == [second.id]
    assert ids("status=dead&status=sent") == [second.id, first.id]
    assert ids("kind=ContainerStopRequest") == [third.id, second.id]
    assert ids("queue=create") == [first.id]
    assert ids("aggregate_id=x") == [third.id, first.id]


def test_outbox_invalid_filter_is_400(staff):
    error = assert_error(staff.get("/api/outbox/?status=lost"), 400, "invalid")
    assert "status" in error["details"]


def test_outbox_row_detail_and_404(staff):
    row = _row(last_error="boom")
    assert staff.get(f"/api/outbox/{row.id}/").json()["last_error"] == "boom"
    assert_error(staff.get("/api/outbox/424242/"), 404, "not_found")
    assert_error(staff.get("/api/outbox/99999999999999999999999/"), 404, "not_found")


def test_retry_makes_a_backing_off_row_due_now(staff):
    later = timezone.now() + dt.timedelta(minutes=10)
    row = _row("pending", attempts=2, available_at=later)
    response = staff.post(f"/api/outbox/{row.id}/retry/")
    assert response.status_code == 200, response.content
    row.refresh_from_db()
    assert row.available_at <= timezone.now()
    assert row.attempts == 2
    assert response.json()["id"] == row.id


@pytest.mark.parametrize("status", ["processing", "sent", "dead"])
def test_retry_of_a_row_not_pending_is_409(staff, status):
    row = _row(status)
    error = assert_error(staff.post(f"/api/outbox/{row.id}/retry/"), 409, "not_retriable")
    assert status in error["message"]


def test_retry_of_unknown_row_is_404(staff):
    assert_error(staff.post("/api/outbox/424242/retry/"), 404, "not_found")


# --- queue ----------------------------------------------------------------------------------


def test_queue_reports_counts_limits_and_relay_stats(staff, make_instance, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 7, "create_queue_max_concurrency": 2})
    oldest = make_instance("pending")
    make_instance("pending")
    make_instance("creating")
    make_instance("starting")
    make_instance("running")
    _row("dead")
    _row("dead")
    _row("processing")
    minute = timezone.now().replace(second=0, microsecond=0)
    Counter.objects.create(minute=minute, name="sent", count=5)
    Counter.objects.create(minute=minute - dt.timedelta(minutes=5), name="sent", count=2)
    Counter.objects.create(minute=minute - dt.timedelta(hours=3), name="sent", count=100)
    Counter.objects.create(minute=minute, name="retried", count=1)
    type(oldest).objects.filter(pk=oldest.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=90)
    )

    body = staff.get("/api/queue/").json()
    age = body.pop("oldest_pending_age_seconds")
    assert 89 <= age < 120
    assert body == {
        "scope": "installation",
        "pending_count": 2,
        "active_count": 2,
        "max_pending": 7,
        "max_concurrency": 2,
        "dead_count": 2,
        "relay": {
            "window_seconds": 3600,
            "claimed": 0,
            "sent": 7,
            "superseded": 0,
            "deferred": 0,
            "retried": 1,
            "dead": 0,
            "reclaimed_unstarted": 0,
            "cluster_restarted": 0,
            "in_flight": 1,
        },
    }


def test_queue_when_idle_has_no_oldest_pending(alice):
    body = alice.get("/api/queue/").json()
    assert body["pending_count"] == 0
    assert body["oldest_pending_age_seconds"] is None
