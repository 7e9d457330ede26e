"""Per-user throttles on creates and on every write: 429 ``throttled`` with Retry-After,
counted in the database so that every web process counts together."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from containers.models import ContainerInstance
from core.config import ConfigError, load_config
from core.models import Lease
from tests.api.helpers import assert_error, token_client
from tests.factories import InstanceFactory, UserFactory, api_token
from tests.processes import running_app

pytestmark = pytest.mark.django_db


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


# Another web process: the same create through the API, in a manage.py process of its own.
OTHER_PROCESS = """
from rest_framework.test import APIClient
client = APIClient(SERVER_NAME="localhost", HTTP_AUTHORIZATION="Token {key}")
print(*[client.post("/api/containers/", {{"template": "sleeper"}}, format="json").status_code
        for _ in range(2)])
"""


@pytest.mark.slow  # a real manage.py process
@pytest.mark.django_db(transaction=True)
def test_two_processes_count_one_users_creates_together(
    postgres, tmp_path, gobrave_config, template, owner
):
    gobrave_config(api={"throttle_create": "3/minute"})
    alice = token_client(owner)
    assert [_create(alice).status_code for _ in range(2)] == [202, 202]
    key = api_token(owner)  # another of alice's tokens: the count is the user's
    with running_app(tmp_path, api_throttle_create="3/minute") as app:
        done = app.manage("shell", "-c", OTHER_PROCESS.format(key=key))
    assert done.returncode == 0, done.stderr
    rows = list(Lease.objects.values_list("scope", "holder", "count"))
    assert done.stdout.split()[-2:] == ["202", "429"], (done.stdout, rows)
    assert_error(_create(alice), 429, "throttled")
    assert ContainerInstance.objects.count() == 3
    assert ("throttle:create", f"user:{owner.pk}", 3) in rows, rows


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


def test_each_throttle_costs_a_create_one_statement(gobrave_config, template, owner):
    alice = token_client(owner)
    _create(alice)  # the token's and the template's first reads are behind us

    def statements() -> list[str]:
        with CaptureQueriesContext(connection) as done:
            assert _create(alice).status_code == 202
        return [q["sql"] for q in done.captured_queries]

    gobrave_config(api={"throttle_create": None, "throttle_write": None})
    unthrottled = statements()
    gobrave_config(api={"throttle_create": "100/minute", "throttle_write": "100/minute"})
    throttled = statements()
    counted = [sql for sql in throttled if "core_lease" in sql]
    assert len(throttled) == len(unthrottled) + 2, throttled
    assert len(counted) == 2 and all("ON CONFLICT" in sql for sql in counted), counted


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


def test_an_anonymous_caller_is_counted_by_its_address_never_by_a_header_it_chose(
    gobrave_config, settings
):
    """X-Forwarded-For is the client's to write: a fresh one per request must not buy a
    fresh allowance. Behind a proxy, the proxy's own header (GOBRAVE_CLIENT_IP_HEADER)
    counts."""
    from django.contrib.auth.models import AnonymousUser
    from rest_framework.test import APIRequestFactory

    from core.api.throttles import WriteThrottle

    gobrave_config(api={"throttle_write": "2/minute"})

    def allowed(**meta) -> bool:
        request = APIRequestFactory().post("/api/anything/", REMOTE_ADDR="203.0.113.9", **meta)
        request.user = AnonymousUser()
        return WriteThrottle().allow_request(request, view=None)

    spoofed = [allowed(HTTP_X_FORWARDED_FOR=f"198.51.100.{n}") for n in range(4)]
    assert spoofed == [True, True, False, False], spoofed
    settings.GOBRAVE_CLIENT_IP_HEADER = "HTTP_X_REAL_IP"
    behind = [allowed(HTTP_X_REAL_IP="192.0.2.7") for _ in range(3)]
    assert behind == [True, True, False], behind
