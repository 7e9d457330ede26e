"""Dismissing a dead letter (``outbox_dead_resolve``): ``resolved_at`` set once, through the
API and the admin, refused for any row that is not dead; the status never moves."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from outbox.models import OutboxEvent
from tests.admin.conftest import make_user
from tests.api.helpers import assert_error, token_client

pytestmark = pytest.mark.django_db


def _row(status: str) -> OutboxEvent:
    return OutboxEvent.objects.create(
        kind="ContainerCreateRequest",
        queue="create",
        aggregate_id="a",
        status=status,
        available_at=timezone.now(),
        last_error="boom",
    )


@pytest.fixture
def operator_api():
    perms = Permission.objects.filter(codename__in=["view_outboxevent", "change_outboxevent"])
    return token_client(make_user("op", perms=perms))


def test_dismissing_a_dead_letter_marks_it_resolved_once(operator_api):
    row = _row("dead")
    first = operator_api.post(f"/api/outbox/{row.id}/dismiss/")
    assert first.status_code == 200, first.content
    assert first.json()["status"] == "dead" and first.json()["resolved_by"] == "op"
    again = operator_api.post(f"/api/outbox/{row.id}/dismiss/")
    assert again.json()["resolved_at"] == first.json()["resolved_at"]  # idempotent
    row.refresh_from_db()
    assert row.status == "dead" and row.resolved_at is not None and row.last_error == "boom"


@pytest.mark.parametrize("status", ["pending", "processing", "sent"])
def test_dismissing_a_row_that_is_not_dead_is_409_and_changes_nothing(operator_api, status):
    row = _row(status)
    error = assert_error(operator_api.post(f"/api/outbox/{row.id}/dismiss/"), 409, "not_dead")
    assert status in error["message"]
    row.refresh_from_db()
    assert row.status == status and row.resolved_at is None


def test_dismissing_an_unknown_row_is_404_and_a_viewer_may_not(operator_api):
    assert_error(operator_api.post("/api/outbox/424242/dismiss/"), 404, "not_found")
    viewer = token_client(
        make_user("look", perms=Permission.objects.filter(codename="view_outboxevent"))
    )
    row = _row("dead")
    assert viewer.post(f"/api/outbox/{row.id}/dismiss/").status_code == 403
    row.refresh_from_db()
    assert row.resolved_at is None


def test_the_admin_action_dismisses_dead_rows_and_refuses_the_others(client):
    perms = Permission.objects.filter(codename__in=["view_outboxevent", "change_outboxevent"])
    client.force_login(make_user("op", perms=perms))
    dead, pending = _row("dead"), _row("pending")
    response = client.post(
        reverse("admin:outbox_outboxevent_changelist"),
        {"action": "dismiss", "_selected_action": [dead.pk, pending.pk]},
    )
    assert response.status_code == 302
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said == [f"#{dead.pk}: dismissed", f"#{pending.pk}: refused: it is pending, not dead"]
    dead.refresh_from_db()
    pending.refresh_from_db()
    assert dead.resolved_at is not None and dead.resolved_by == "op"
    assert pending.resolved_at is None
