"""/api/runtimes/{id}/cordon/, uncordon/ and decommission/: who may, and what they do."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from containers.models import ContainerEvent, ContainerInstance, Runtime, RuntimeEvent
from outbox.models import OutboxEvent
from tenants.roles import roles_install
from tests.api.helpers import assert_error, token_client
from tests.factories import InstanceFactory, RuntimeFactory, UserFactory
from tests.placing import place

pytestmark = pytest.mark.django_db

GONE = "tcp://127.0.0.1:9"  # nothing listens there: an engine call would fail the test


@pytest.fixture
def watcher():
    """Staff who may view runtimes but not change them (the ready-made viewers group)."""
    roles_install()
    user = UserFactory(username="watcher", is_staff=True)
    viewers = Group.objects.exclude(permissions__codename="change_runtime").get(
        permissions__codename="view_runtime"
    )
    user.groups.add(viewers)
    return token_client(user)


@pytest.fixture
def gone():
    return RuntimeFactory(name="gone", base_url=GONE, labels={"engine": "fake"})


ACTIONS = [
    ("post", "cordon/", {}),
    ("post", "uncordon/", {}),
    ("get", "decommission/", None),
    ("post", "decommission/", {"confirm": "gone"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ACTIONS)
@pytest.mark.parametrize(("who", "status"), [("anonymous", 401), ("owner", 403), ("watcher", 403)])
def test_the_fleet_actions_need_change_runtime_and_refusals_change_nothing(
    clients, watcher, gone, method, path, body, who, status
):
    client = watcher if who == "watcher" else clients[who]
    instance = InstanceFactory(runtime=gone, status="running")
    response = getattr(client, method)(f"/api/runtimes/{gone.pk}/{path}", body, format="json")
    assert_error(response, status)
    row = Runtime.objects.get(pk=gone.pk)
    assert (row.cordoned, row.enabled, row.decommissioned_at) == (False, True, None), vars(row)
    assert ContainerInstance.objects.filter(pk=instance.pk).exists()


def test_staff_cordons_a_create_waits_pending_naming_it_then_uncordons(
    staff, alice, template, fake_runtime
):
    """A create whose only engine is cordoned is accepted (no 409 any more) and waits in
    ``pending``, unplaced, saying why; once uncordoned it is placed there and the API
    says where and why."""
    body = staff.post(f"/api/runtimes/{fake_runtime.pk}/cordon/").json()
    assert (body["cordoned"], body["cordoned_by"]) == (True, "user:root"), body
    accepted = alice.post("/api/containers/", {"template": "sleeper"}, format="json")
    assert accepted.status_code == 202, accepted.content
    created = accepted.json()
    assert (created["status"], created["runtime"], created["placement_reason"]) == (
        "pending", None, "",
    ), created  # fmt: skip
    place(ContainerInstance.objects.get(pk=created["id"]))
    shown = alice.get(f"/api/containers/{created['id']}/").json()
    assert (shown["status"], shown["runtime"], shown["status_reason"]) == (
        "pending", None, "waiting: no engine with room: fake cordoned",
    ), shown  # fmt: skip
    body = staff.post(f"/api/runtimes/{fake_runtime.pk}/uncordon/").json()
    assert (body["cordoned"], body["cordoned_at"]) == (False, None), body
    place(ContainerInstance.objects.get(pk=created["id"]))
    shown = alice.get(f"/api/containers/{created['id']}/").json()
    assert (shown["status"], shown["runtime"]["name"], shown["placement_reason"]) == (
        "creating", "fake", "spread: fake, the only engine with room",
    ), shown  # fmt: skip


def test_decommission_shows_what_it_forgets_then_needs_the_name_then_forgets_it(staff, gone):
    instance = InstanceFactory(runtime=gone, status="running", container_id="feedbeef")
    preview = staff.get(f"/api/runtimes/{gone.pk}/decommission/").json()
    assert [(i["id"], i["container_name"], i["container_id"]) for i in preview["instances"]] == [
        (str(instance.id), f"gb-{instance.id}", "feedbeef")
    ], preview

    for bad in ({}, {"confirm": "not-it"}, {"confirm": ""}, {"confirm": "gone", "force": True}):
        response = staff.post(f"/api/runtimes/{gone.pk}/decommission/", bad, format="json")
        assert_error(response, 400, "invalid")
    assert ContainerInstance.objects.filter(pk=instance.pk).exists()
    assert Runtime.objects.get(pk=gone.pk).decommissioned_at is None

    too_long = {"confirm": "gone", "reason": "x" * 501}
    response = staff.post(f"/api/runtimes/{gone.pk}/decommission/", too_long, format="json")
    assert_error(response, 400, "invalid")
    assert Runtime.objects.get(pk=gone.pk).decommissioned_at is None

    response = staff.post(
        f"/api/runtimes/{gone.pk}/decommission/",
        {"confirm": "gone", "reason": "rack 4 burned"},
        format="json",
    )
    body = response.json()
    assert response.status_code == 200, body
    assert body["instances"] == [{"id": str(instance.id), "name": instance.name}], body
    runtime = body["runtime"]
    assert (runtime["cordoned"], runtime["enabled"]) == (True, False), runtime
    assert runtime["decommissioned_at"], runtime
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
    deleted = ContainerEvent.objects.get(instance_id=instance.id, kind="ContainerDeleted")
    assert "engine decommissioned" in deleted.message, deleted.message
    begun = RuntimeEvent.objects.get(runtime_id=gone.pk, kind="engine.decommissioning")
    assert begun.message.endswith(": rack 4 burned"), begun.message
    assert not OutboxEvent.objects.filter(aggregate_id=str(instance.id), status="pending").exists()


def test_a_decommissioned_runtime_is_not_switched_on_again_by_a_patch(staff, gone):
    staff.post(f"/api/runtimes/{gone.pk}/decommission/", {"confirm": "gone"}, format="json")
    response = staff.patch(f"/api/runtimes/{gone.pk}/", {"enabled": True}, format="json")
    error = assert_error(response, 400, "invalid_runtime")
    assert "add the engine as a new runtime" in error["message"], error
    row = Runtime.objects.get(pk=gone.pk)
    assert (row.enabled, row.cordoned) == (False, True), vars(row)


def test_the_fleet_actions_on_an_unknown_runtime_are_404(staff):
    for path in ("cordon/", "uncordon/", "decommission/"):
        assert_error(staff.post(f"/api/runtimes/987654/{path}", {"confirm": "x"}), 404, "not_found")
