"""Why a request failed, or waits for a retry, is shown wherever the instance is: the API
(``status_reason``), its history, the admin's list and the instance's page (issue 31)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from containers.engines import engine_for
from containers.models import ContainerInstance
from tests.factories import UserFactory
from tests.processes import outbox_rows, relay_drain

pytestmark = pytest.mark.django_db


def _shown(instance_id) -> str:
    stored = ContainerInstance.objects.get(pk=instance_id)
    return f"{stored.status} {stored.status_reason!r}\n{outbox_rows()}"


def test_a_retrying_create_says_so_in_the_api_its_history_and_the_admin(
    alice, template, fake_runtime, client
):
    (engine_for(fake_runtime).root / "fail-create").write_text("1")
    created = alice.post("/api/containers/", {"template": "sleeper"}, format="json").json()
    assert relay_drain(rounds=1) == ["retried"], _shown(created["id"])
    reason = ContainerInstance.objects.get(pk=created["id"]).status_reason
    assert reason.startswith("retrying (attempt 1 of "), _shown(created["id"])

    body = alice.get(f"/api/containers/{created['id']}/").json()
    assert (body["status"], body["status_reason"]) == ("creating", reason), body
    newest = alice.get(f"/api/containers/{created['id']}/events/").json()["results"][0]
    assert (newest["kind"], newest["kind_display"], newest["message"]) == (
        "retry",
        "request retried",
        reason,
    ), newest

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    listed = client.get(reverse("admin:containers_containerinstance_changelist")).content
    assert b"retrying (attempt 1 of " in listed
    page = client.get(
        reverse("admin:containers_containerinstance_change", args=[created["id"]])
    ).content.decode()
    assert reason in page, reason


def test_a_failed_create_says_why_in_the_engine_s_words_in_the_api(alice, template, fake_runtime):
    (engine_for(fake_runtime).root / "permanent-create").write_text("the engine refuses this")
    created = alice.post("/api/containers/", {"template": "sleeper"}, format="json").json()
    assert relay_drain() == ["dead"], _shown(created["id"])
    body = alice.get(f"/api/containers/{created['id']}/").json()
    assert (body["status"], body["status_reason"]) == (
        "failed",
        "create failed: the engine refuses this",
    ), body
