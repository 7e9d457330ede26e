"""The instance's policy status and ``POST /api/containers/{id}/extend/``."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from containers.models import ContainerEvent, ContainerInstance
from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db

HOUR = 3600


@pytest.fixture
def timed(make_instance, template):
    """alice's running instance, stopped by max_lifetime in an hour, extendable by her."""
    policy = {
        "max_lifetime": HOUR,
        "extendable_by": "owner",
        "extend_max": HOUR,
        "idle_timeout": None,
        "idle_cpu_threshold": 0.02,
        "delete_stopped_after": None,
    }
    instance = make_instance("running")
    stop_at = timezone.now() + dt.timedelta(seconds=HOUR)
    ContainerInstance.objects.filter(pk=instance.pk).update(
        spec={**instance.spec, "policy": policy}, stop_at=stop_at
    )
    instance.refresh_from_db()
    return instance


def test_an_instance_says_when_it_will_be_stopped_and_why(alice, timed):
    body = alice.get(f"/api/containers/{timed.pk}/").json()
    assert body["policy"]["stop_reason"] == "max_lifetime: running longer than 1h"
    assert body["policy"]["stop_at"] is not None
    assert (body["policy"]["extendable"], body["policy"]["extend_left"]) == (True, HOUR)


def test_an_instance_without_policies_says_nothing_is_due(alice, make_instance):
    body = alice.get(f"/api/containers/{make_instance('running').pk}/").json()
    assert body["policy"] == {
        "stop_at": None, "stop_reason": "", "idle_since": None, "idle_stop_at": None,
        "delete_at": None, "extendable": False, "extend_left": 0,
    }  # fmt: skip


def test_the_owner_extends_it(alice, timed):
    before = timed.stop_at
    response = alice.post(f"/api/containers/{timed.pk}/extend/", {"seconds": 600}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["policy"]["extend_left"] == HOUR - 600
    row = ContainerInstance.objects.get(pk=timed.pk)
    assert row.stop_at == before + dt.timedelta(seconds=600)
    event = ContainerEvent.objects.get(instance_id=timed.pk, kind="extend")
    assert (event.actor, event.data["seconds"]) == ("user:alice", 600)


def test_an_extension_past_what_is_left_is_refused_with_409_and_changes_nothing(alice, timed):
    response = alice.post(
        f"/api/containers/{timed.pk}/extend/", {"seconds": HOUR + 1}, format="json"
    )
    error = assert_error(response, 409, "extension_refused")
    assert error["details"]["left"] == HOUR
    assert ContainerInstance.objects.get(pk=timed.pk).stop_at == timed.stop_at


def test_another_user_cannot_see_it_to_extend_it(mallory, timed):
    response = mallory.post(f"/api/containers/{timed.pk}/extend/", {"seconds": 60}, format="json")
    assert_error(response, 404)


def test_an_extension_the_template_does_not_allow_is_refused_with_403(alice, timed):
    spec = {**timed.spec, "policy": {**timed.spec["policy"], "extendable_by": "staff"}}
    ContainerInstance.objects.filter(pk=timed.pk).update(spec=spec)
    response = alice.post(f"/api/containers/{timed.pk}/extend/", {"seconds": 60}, format="json")
    assert_error(response, 403, "extension_not_allowed")
    assert ContainerInstance.objects.get(pk=timed.pk).stop_at == timed.stop_at


@pytest.mark.parametrize("body", [{}, {"seconds": 0}, {"seconds": "soon"}, {"seconds": 1.5},
                                  {"seconds": 60, "extra": 1}])  # fmt: skip
def test_bad_input_is_a_400_and_changes_nothing(alice, timed, body):
    response = alice.post(f"/api/containers/{timed.pk}/extend/", body, format="json")
    assert_error(response, 400)
    assert ContainerInstance.objects.get(pk=timed.pk).stop_at == timed.stop_at
