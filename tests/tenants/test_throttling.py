"""Per-user throttles on creates and on every write: 429 ``throttled`` with Retry-After."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from containers.models import ContainerInstance
from core.config import ConfigError, load_config
from tests.api.helpers import assert_error, token_client
from tests.factories import InstanceFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_history():
    cache.clear()
    yield
    cache.clear()


def _create(client):
    return client.post("/api/containers/", {"template": "sleeper"}, format="json")


def test_creates_beyond_the_rate_are_throttled_with_retry_after(gobrave_config, template, owner):
    gobrave_config(api={"throttle_create": "3/minute"})
    alice = token_client(owner)
    assert [_create(alice).status_code for _ in range(3)] == [202, 202, 202]
    response = _create(alice)
    assert_error(response, 429, "throttled")
    assert 1 <= int(response["Retry-After"]) <= 60
    assert ContainerInstance.objects.count() == 3
    # Reads are not throttled, and another user has a history of their own.
    assert alice.get("/api/containers/").status_code == 200
    assert _create(token_client(UserFactory(username="bob"))).status_code == 202


def test_every_write_counts_against_the_write_rate(gobrave_config, template, owner, fake_runtime):
    gobrave_config(api={"throttle_write": "2/minute"})
    instance = InstanceFactory(owner=owner, template=template, runtime=fake_runtime)
    ContainerInstance.objects.filter(pk=instance.pk).update(status="running")
    alice = token_client(owner)
    assert _create(alice).status_code == 202
    assert alice.post(f"/api/containers/{instance.pk}/stop/").status_code == 202
    response = alice.delete(f"/api/containers/{instance.pk}/")
    assert_error(response, 429, "throttled")
    assert int(response["Retry-After"]) >= 1
    instance.refresh_from_db()
    assert instance.status == "stop_pending"


def test_an_empty_rate_turns_the_throttle_off(gobrave_config, template, owner):
    gobrave_config(api={"throttle_create": None, "throttle_write": None})
    alice = token_client(owner)
    assert {_create(alice).status_code for _ in range(5)} == {202}


def test_defaults_let_a_burst_meet_the_admission_limits_not_the_throttle():
    api = load_config(path="/nonexistent.yml", environ={})["api"]
    assert api["throttle_create"] == "1000/minute"
    assert api["throttle_write"] == "3000/minute"


@pytest.mark.parametrize("rate", ["fast", "0/minute", "10/fortnight", 5])
def test_a_bad_rate_is_refused_at_start_naming_the_key(rate):
    with pytest.raises(ConfigError, match="api.throttle_create"):
        load_config(path="/nonexistent.yml", environ={"GOBRAVE_API_THROTTLE_CREATE": str(rate)})
