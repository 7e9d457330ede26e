"""/api/queue/: a user sees their own counts; the installation's need the operator's view."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from containers.models import ContainerInstance
from core.models import Counter
from tenants.models import UserQuota

pytestmark = pytest.mark.django_db


def _rows() -> list:
    return list(ContainerInstance.objects.values_list("owner__username", "status"))


@pytest.fixture
def busy(make_instance, other_user):
    """Alice: 1 pending (90 s old), 1 creating, 1 running. Mallory: 3 pending, 1 starting."""
    oldest = make_instance("pending")
    ContainerInstance.objects.filter(pk=oldest.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=90)
    )
    make_instance("creating")
    make_instance("running")
    for status in ("pending", "pending", "pending", "starting"):
        make_instance(status, owner=other_user)
    minute = timezone.now().replace(second=0, microsecond=0)
    Counter.objects.create(minute=minute, name="sent", count=3)


def test_a_user_sees_only_their_own_counts_and_no_relay(alice, owner, busy, gobrave_config):
    gobrave_config(container={"max_pending_per_owner": 5, "max_instances_per_owner": None})
    UserQuota.objects.create(user=owner, max_instances_per_owner=9)
    body = alice.get("/api/queue/").json()
    age = body.pop("oldest_pending_age_seconds")
    assert 89 <= age < 120, body
    assert body == {
        "scope": "owner",
        "pending_count": 1,
        "active_count": 1,
        "instance_count": 3,
        "max_pending_per_owner": 5,
        "max_instances_per_owner": 9,
    }, _rows()


def test_an_operator_sees_the_installation_and_the_relay(staff, busy):
    body = staff.get("/api/queue/").json()
    assert body["scope"] == "installation", body
    assert (body["pending_count"], body["active_count"]) == (4, 2), (body, _rows())
    assert body["relay"]["sent"] == 3, body
