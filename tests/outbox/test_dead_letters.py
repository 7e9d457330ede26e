"""Dismissing a dead letter (``outbox_dead_resolve``) and requeuing one
(``outbox_dead_requeue``): ``resolved_at`` set once, through the API and the admin,
refused for any row that is not dead; the status never moves. A requeue's new row is an
ordinary pending row that retention never deletes; the dead row goes after its
retention. A resolved dead row (dismissed or requeued) is never requeued again."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from core.retention import retention_run
from outbox.models import OutboxEvent
from tests.admin.conftest import make_user
from tests.api.helpers import assert_error, token_client

pytestmark = pytest.mark.django_db


def _row(status: str) -> OutboxEvent:
    return OutboxEvent.objects.create(
        kind="ContainerCreateRequest",
        queue="create",
        aggregate_id="a",
        fairness_key="7",
        payload={"by": "user:alice"},
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


def test_requeuing_a_dead_letter_writes_a_pending_copy_and_resolves_the_dead_row(operator_api):
    row = _row("dead")
    answer = operator_api.post(f"/api/outbox/{row.id}/requeue/")
    assert answer.status_code == 201, answer.content
    again = OutboxEvent.objects.get(pk=answer.json()["id"])
    copied = (again.status, again.kind, again.queue, again.aggregate_id, again.fairness_key)
    assert copied == ("pending", row.kind, "create", "a", "7"), copied
    assert again.payload == {"by": "user:alice"} and again.attempts == 0, again.payload
    assert again.id > row.id and again.resolved_at is None
    row.refresh_from_db()
    assert (row.status, row.resolved_by) == ("dead", "op"), (row.status, row.resolved_by)
    assert row.resolved_at is not None


def test_requeuing_a_row_that_is_not_dead_is_409_and_writes_nothing(operator_api):
    row = _row("pending")
    assert_error(operator_api.post(f"/api/outbox/{row.id}/requeue/"), 409, "not_dead")
    assert_error(operator_api.post("/api/outbox/424242/requeue/"), 404, "not_found")
    assert list(OutboxEvent.objects.values_list("id", flat=True)) == [row.id]
    unknown = _row("dead")
    OutboxEvent.objects.filter(pk=unknown.pk).update(kind="NoSuchKind")
    assert_error(operator_api.post(f"/api/outbox/{unknown.id}/requeue/"), 409, "not_requeuable")
    unknown.refresh_from_db()
    assert unknown.resolved_at is None and OutboxEvent.objects.count() == 2
    viewer = token_client(
        make_user("look", perms=Permission.objects.filter(codename="view_outboxevent"))
    )
    dead = _row("dead")
    assert viewer.post(f"/api/outbox/{dead.id}/requeue/").status_code == 403
    dead.refresh_from_db()
    assert dead.resolved_at is None and OutboxEvent.objects.count() == 3


def test_retention_purges_the_requeued_dead_row_and_never_its_pending_copy(
    operator_api, gobrave_config
):
    gobrave_config(retention={"dead_letters_resolved": 86400.0})
    row = _row("dead")
    again = operator_api.post(f"/api/outbox/{row.id}/requeue/").json()
    assert retention_run()["outbox.dead_letters_resolved"] == 0  # resolved just now
    past = timezone.now() - dt.timedelta(days=2)
    OutboxEvent.objects.filter(pk__in=[row.id, again["id"]]).update(resolved_at=past)
    assert retention_run()["outbox.dead_letters_resolved"] == 1
    left = list(OutboxEvent.objects.values_list("id", "status"))
    assert left == [(again["id"], "pending")], left


def test_the_admin_action_requeues_dead_rows_and_refuses_the_others(client):
    perms = Permission.objects.filter(codename__in=["view_outboxevent", "change_outboxevent"])
    client.force_login(make_user("op", perms=perms))
    dead, pending = _row("dead"), _row("pending")
    response = client.post(
        reverse("admin:outbox_outboxevent_changelist"),
        {"action": "requeue", "_selected_action": [dead.pk, pending.pk]},
    )
    assert response.status_code == 302
    again = OutboxEvent.objects.exclude(pk__in=[dead.pk, pending.pk]).get()
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert said == [
        f"#{dead.pk}: requeued as #{again.pk}",
        f"#{pending.pk}: refused: it is pending, not dead",
    ]
    dead.refresh_from_db()
    assert dead.resolved_at is not None and dead.resolved_by == "op"
    assert again.status == "pending"


def test_the_command_requeues_and_dismisses_and_refuses_rows_that_are_not_dead():
    dead, other, pending = _row("dead"), _row("dead"), _row("pending")
    out, err = io.StringIO(), io.StringIO()
    call_command("outbox_dead", "requeue", str(dead.id), "--as", "ops", stdout=out)
    again = OutboxEvent.objects.get(id=int(out.getvalue().split("#")[-1]))
    assert (again.status, again.kind) == ("pending", dead.kind), out.getvalue()
    with pytest.raises(CommandError, match="1 of 2 refused"):
        call_command(
            "outbox_dead", "dismiss", str(other.id), str(pending.id), stdout=out, stderr=err
        )
    assert f"#{pending.id}: refused: outbox row #{pending.id} is pending" in err.getvalue()
    rows = {r.id: (r.status, r.resolved_at is not None) for r in OutboxEvent.objects.all()}
    expected = {
        dead.id: ("dead", True),
        other.id: ("dead", True),
        pending.id: ("pending", False),
        again.id: ("pending", False),
    }
    assert rows == expected, rows
    assert OutboxEvent.objects.get(id=dead.id).resolved_by == "ops"


def test_requeuing_a_dead_letter_twice_is_409_and_writes_one_row(operator_api):
    row = _row("dead")
    first = operator_api.post(f"/api/outbox/{row.id}/requeue/")
    assert first.status_code == 201, first.content
    error = assert_error(operator_api.post(f"/api/outbox/{row.id}/requeue/"), 409, "not_requeuable")
    row.refresh_from_db()
    assert f"already resolved by op at {row.resolved_at.isoformat()}" in error["message"], error
    rows = list(OutboxEvent.objects.order_by("id").values_list("id", "status"))
    assert rows == [(row.id, "dead"), (first.json()["id"], "pending")], rows


def test_requeuing_a_dismissed_dead_letter_is_409_and_keeps_its_resolution(operator_api):
    row = _row("dead")
    operator_api.post(f"/api/outbox/{row.id}/dismiss/")
    row.refresh_from_db()
    error = assert_error(operator_api.post(f"/api/outbox/{row.id}/requeue/"), 409, "not_requeuable")
    assert "already resolved by op" in error["message"], error
    assert error["details"]["resolved_by"] == "op", error
    again = OutboxEvent.objects.get(pk=row.pk)
    assert (again.resolved_at, again.resolved_by) == (row.resolved_at, "op"), again.resolved_by
    assert OutboxEvent.objects.count() == 1, list(OutboxEvent.objects.values("id", "status"))


def test_the_admin_action_and_the_command_refuse_a_resolved_dead_letter(client):
    perms = Permission.objects.filter(codename__in=["view_outboxevent", "change_outboxevent"])
    client.force_login(make_user("op", perms=perms))
    dead = _row("dead")
    call_command("outbox_dead", "requeue", str(dead.id), "--as", "ops", stdout=io.StringIO())
    response = client.post(
        reverse("admin:outbox_outboxevent_changelist"),
        {"action": "requeue", "_selected_action": [dead.pk]},
    )
    said = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(said) == 1 and said[0].startswith(f"#{dead.pk}: refused: "), said
    assert "already resolved by ops at" in said[0], said
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 of 1 refused"):
        call_command("outbox_dead", "requeue", str(dead.id), stdout=io.StringIO(), stderr=err)
    assert "already resolved by ops at" in err.getvalue(), err.getvalue()
    assert OutboxEvent.objects.filter(status="pending").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_requeues_of_one_dead_letter_at_once_write_exactly_one_row():
    """Real threads, each with its own connection: both wait on the dead row's lock; the
    one that takes it second finds it resolved and is refused."""
    import threading

    from django.db import connections

    from outbox.errors import NotRequeuable
    from outbox.services import outbox_dead_requeue

    row = _row("dead")
    start = threading.Barrier(2)
    outcomes: list[object] = []

    def requeue(actor: str) -> None:
        try:
            start.wait(30)
            outcomes.append(outbox_dead_requeue(event_id=row.id, actor=actor).id)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcomes.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=requeue, args=(f"op{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    written = [o for o in outcomes if isinstance(o, int)]
    refused = [o for o in outcomes if isinstance(o, NotRequeuable)]
    assert len(written) == 1 and len(refused) == 1, outcomes
    rows = list(OutboxEvent.objects.order_by("id").values_list("id", "status"))
    assert rows == [(row.id, "dead"), (written[0], "pending")], rows
