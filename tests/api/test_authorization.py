"""Who sees whose instances (the whole matrix is tests/tenants/test_permission_matrix.py)."""

from __future__ import annotations

import pytest

from outbox.models import OutboxEvent
from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db


def test_list_shows_another_user_nothing_of_alices(mallory, staff, make_instance):
    instance = make_instance()
    assert mallory.get("/api/containers/").json()["results"] == []
    assert mallory.get(f"/api/containers/?owner={instance.owner.username}").json()["results"] == []
    assert len(staff.get("/api/containers/").json()["results"]) == 1


def test_another_users_refused_request_changes_nothing(mallory, make_instance):
    instance = make_instance("running")
    assert_error(mallory.post(f"/api/containers/{instance.pk}/stop/"), 404, "not_found")
    instance.refresh_from_db()
    assert instance.status == "running"
    assert OutboxEvent.objects.count() == 0


def test_an_operator_acts_on_anyones_instance_and_is_the_actor(staff, make_instance):
    instance = make_instance("running")
    response = staff.post(f"/api/containers/{instance.pk}/stop/")
    assert response.status_code == 202
    assert OutboxEvent.objects.get().payload == {"by": "user:root"}
