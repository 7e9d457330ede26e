"""Per-owner quotas: which value applies, and how a create over one is refused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from containers.models import ContainerEvent, ContainerInstance
from outbox.models import OutboxEvent
from tenants.models import GroupQuota, UserQuota
from tenants.selectors import OwnerQuotas, owner_quotas
from tests.api.helpers import assert_error, token_client
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db


def _group(name: str, owner, **quota) -> Group:
    group = Group.objects.create(name=name)
    owner.groups.add(group)
    if quota:
        GroupQuota.objects.create(group=group, **quota)
    return group


def test_no_limit_by_default(owner):
    assert owner_quotas(owner=owner) == OwnerQuotas(None, None)


def test_config_applies_when_nothing_overrides_it(owner, gobrave_config):
    gobrave_config(container={"max_pending_per_owner": 3, "max_instances_per_owner": 7})
    assert owner_quotas(owner=owner) == OwnerQuotas(3, 7)


def test_the_most_generous_group_wins_over_config_key_by_key(owner, gobrave_config):
    gobrave_config(container={"max_pending_per_owner": 3, "max_instances_per_owner": 7})
    _group("small", owner, max_pending_per_owner=4)
    _group("big", owner, max_pending_per_owner=9)
    _group("silent", owner, max_pending_per_owner=None, max_instances_per_owner=None)
    assert owner_quotas(owner=owner) == OwnerQuotas(9, 7)


def test_the_users_own_override_wins_over_the_groups_even_when_smaller(owner, gobrave_config):
    gobrave_config(container={"max_instances_per_owner": 7})
    _group("big", owner, max_pending_per_owner=9, max_instances_per_owner=20)
    UserQuota.objects.create(user=owner, max_pending_per_owner=0)
    assert owner_quotas(owner=owner) == OwnerQuotas(0, 20)


def test_another_owners_override_does_not_apply(owner):
    from tests.factories import UserFactory

    UserQuota.objects.create(user=UserFactory(username="bob"), max_pending_per_owner=1)
    assert owner_quotas(owner=owner) == OwnerQuotas(None, None)


def _post(client):
    return client.post("/api/containers/", {"template": "sleeper"}, format="json")


def test_over_the_pending_quota_is_429_owner_quota_with_retry_after(owner, template):
    UserQuota.objects.create(user=owner, max_pending_per_owner=2)
    alice = token_client(owner)
    assert [_post(alice).status_code for _ in range(2)] == [202, 202]
    response = _post(alice)
    error = assert_error(response, 429, "owner_quota")
    assert int(response["Retry-After"]) >= 1
    assert error["details"]["quota"] == "max_pending_per_owner"
    assert (error["details"]["limit"], error["details"]["current"]) == (2, 2)
    assert "max_pending_per_owner" in error["message"]
    rows = (ContainerInstance.objects.count(), OutboxEvent.objects.count())
    assert rows == (2, 2), list(ContainerInstance.objects.values("name", "status"))
    assert ContainerEvent.objects.count() == 2


def test_another_owner_is_not_held_back_by_alices_quota(owner, template):
    from tests.factories import UserFactory

    UserQuota.objects.create(user=owner, max_pending_per_owner=1)
    alice, bob = token_client(owner), token_client(UserFactory(username="bob"))
    assert (_post(alice).status_code, _post(alice).status_code) == (202, 429)
    assert _post(bob).status_code == 202


def test_over_the_instance_quota_is_409_quota_exceeded_without_retry_after(
    owner, template, fake_runtime
):
    """Only a delete cures it, so no Retry-After invites a client to wait; instances
    being deleted are not counted."""
    UserQuota.objects.create(user=owner, max_instances_per_owner=2)
    for status in ("running", "stopped", "delete_pending", "deleting"):
        instance = InstanceFactory(owner=owner, template=template, runtime=fake_runtime)
        ContainerInstance.objects.filter(pk=instance.pk).update(status=status)
    alice = token_client(owner)
    response = _post(alice)
    error = assert_error(response, 409, "quota_exceeded")
    assert error["details"]["quota"] == "max_instances_per_owner"
    assert (error["details"]["limit"], error["details"]["current"]) == (2, 2)
    assert "Retry-After" not in response
    assert ContainerInstance.objects.count() == 4
    ContainerInstance.objects.filter(status="stopped").update(status="delete_pending")
    assert _post(alice).status_code == 202


def test_a_zero_override_stops_an_owner_creating(owner, template):
    UserQuota.objects.create(user=owner, max_pending_per_owner=0)
    assert_error(_post(token_client(owner)), 429, "owner_quota")
    assert not ContainerInstance.objects.exists()
