"""Streams on the real web server (gunicorn with uvicorn's workers, as ``make run``
starts it) against the real Docker Engine and a container that prints (issue: a web tier
that streams). One server and one printing container for the module.

The server runs with the production database pool (10 connections per process) and
small stream limits: 5 streams per user, leases of 3 s (checks every second).
"""

from __future__ import annotations

import threading
import uuid

import pytest
import requests
from knox.settings import CONSTANTS

from containers.models import ContainerInstance
from core.models import Lease
from tenants.models import ApiToken
from tenants.services import api_token_revoke
from tests.containers.conftest import IMAGE
from tests.engine_connections import engine_connections
from tests.factories import InstanceFactory, RuntimeFactory, UserFactory, api_token
from tests.processes import descendants, running_app, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.docker]

PER_USER = 5
PRINTS = 'i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.2; done'


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker, tmp_path_factory):
    with (
        django_db_blocker.unblock(),
        running_app(
            tmp_path_factory.mktemp("web"),
            streams_per_user=PER_USER,
            streams_lease_seconds=3,
        ) as app,
    ):
        port = app.web(DATABASE_POOL_MAX="10")
        yield app, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def printer(docker_client):
    """A container that prints a line every 0.2 s, for the module."""
    name = f"gb-test-printer-{uuid.uuid4().hex[:8]}"
    container = docker_client.create_container(IMAGE, ["sh", "-c", PRINTS], name=name)
    docker_client.start(container["Id"])
    yield container["Id"]
    docker_client.remove_container(container["Id"], force=True)


def _instance_on(container_id: str, **fields) -> ContainerInstance:
    """A running instance on the machine's engine whose container is ``container_id``."""
    runtime = RuntimeFactory(
        name=f"docker-{uuid.uuid4().hex[:6]}",
        driver="docker",
        base_url="unix:///var/run/docker.sock",
        labels={"engine": "docker"},
    )
    return InstanceFactory(status="running", runtime=runtime, container_id=container_id, **fields)


class Follower:
    """One ``GET logs/?follow=1`` held open, read as the test asks."""

    def __init__(self, base: str, instance_id, token: str, tail: int = 1) -> None:
        self.response = requests.get(
            f"{base}/api/containers/{instance_id}/logs/",
            params={"follow": "1", "tail": str(tail)},
            headers={"Authorization": f"Token {token}"},
            stream=True,
            timeout=(30, 60),
        )
        self.chunks = self.response.iter_content(chunk_size=None)

    def read(self) -> str:
        """The next piece of output as it comes (waits for it; fails after 60 s)."""
        return next(self.chunks).decode()

    def rest(self) -> str:
        """Everything until the server ends the stream."""
        return "".join(chunk.decode() for chunk in self.chunks)

    def close(self) -> None:
        self.response.close()


def _web_pids(app) -> list[int]:
    main = app.processes["web"].pid
    return [main, *descendants(main)]


def _engine_connections(app) -> int:
    return sum(engine_connections(pid) for pid in _web_pids(app))


def _leases() -> str:
    return repr(list(Lease.objects.values("scope", "holder", "expires_at")))


def _wait_no_stream_leases() -> None:
    wait_for(
        lambda: not Lease.objects.filter(scope="stream").exists(),
        timeout=30,
        message="every stream's lease is released",
        describe=_leases,
    )


def test_over_the_limit_a_user_gets_429_and_keeps_the_streams_they_hold(web, printer):
    app, base = web
    instance = _instance_on(printer)
    token = api_token(instance.owner)
    held = [Follower(base, instance.pk, token) for _ in range(PER_USER)]
    try:
        for follower in held:
            assert follower.response.status_code == 200, follower.response.text
            assert "line" in follower.read()
        refused = requests.get(
            f"{base}/api/containers/{instance.pk}/logs/?follow=1",
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        )
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_streams", refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        # Another user is not held back by the first one's streams.
        other = _instance_on(printer)
        stranger = Follower(base, other.pk, api_token(other.owner))
        assert stranger.response.status_code == 200, stranger.response.text
        stranger.close()
        for follower in held:  # still streaming: new lines keep coming
            assert "line" in follower.read()
    finally:
        for follower in held:
            follower.close()


def test_fifty_followers_hold_no_thread_connection_or_engine_stream_once_gone(web, printer):
    """50 followers (10 users x 5) on a server with 2 workers of 10 pooled database
    connections each: the API answers meanwhile, and once they disconnect no engine
    connection and no lease is left."""
    app, base = web
    followers = []
    try:
        for _ in range(10):
            instance = _instance_on(printer)
            token = api_token(instance.owner)
            followers += [Follower(base, instance.pk, token) for _ in range(PER_USER)]
        for follower in followers:
            assert follower.response.status_code == 200, follower.response.text
            assert follower.read()
        assert _engine_connections(app) >= 50
        viewer = UserFactory()
        headers = {"Authorization": f"Token {api_token(viewer)}"}
        answers = []

        def ask() -> None:
            answers.append(requests.get(f"{base}/api/containers/", headers=headers, timeout=60))

        askers = [threading.Thread(target=ask) for _ in range(12)]  # more than a pool holds
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        assert [a.status_code for a in answers] == [200] * 12, [a.text[:200] for a in answers]
        for follower in followers:  # every follower is still served
            assert follower.read()
    finally:
        for follower in followers:
            follower.close()
    wait_for(
        lambda: _engine_connections(app) == 0,
        timeout=30,
        message="every engine connection of the followers is closed",
        describe=lambda: f"{_engine_connections(app)} engine connections open",
    )
    wait_for(
        lambda: not Lease.objects.filter(scope="stream").exists(), timeout=30, describe=_leases
    )


def test_a_follow_ends_when_its_container_stops(web, docker_client):
    app, base = web
    container = docker_client.create_container(IMAGE, ["sh", "-c", PRINTS])
    docker_client.start(container["Id"])
    try:
        instance = _instance_on(container["Id"])
        follower = Follower(base, instance.pk, api_token(instance.owner))
        assert "line" in follower.read()
        docker_client.stop(container["Id"], timeout=0)
        rest = follower.rest()  # returns once the server ends the response
        assert "[gobrave: stream ended" not in rest, rest[-300:]
    finally:
        docker_client.remove_container(container["Id"], force=True)
    wait_for(
        lambda: not Lease.objects.filter(scope="stream").exists(), timeout=30, describe=_leases
    )


def test_a_follow_ends_when_its_token_is_revoked(web, printer):
    app, base = web
    instance = _instance_on(printer)
    token = api_token(instance.owner)
    follower = Follower(base, instance.pk, token)
    assert "line" in follower.read()
    row = ApiToken.objects.get(token_key=token[: CONSTANTS.TOKEN_KEY_LENGTH])
    api_token_revoke(user=instance.owner, token_id=row.pk)
    rest = follower.rest()  # the next check (every second here) ends it
    assert rest.endswith("[gobrave: stream ended: your login or token is no longer valid]\n"), rest[
        -300:
    ]
    wait_for(
        lambda: not Lease.objects.filter(scope="stream").exists(), timeout=30, describe=_leases
    )


def test_engine_errors_are_503_before_anything_is_sent(web):
    app, base = web
    runtime = RuntimeFactory(
        name="nowhere",
        driver="docker",
        base_url="unix:///nonexistent/docker.sock",
        labels={"engine": "docker"},
    )
    instance = InstanceFactory(status="running", runtime=runtime, container_id="abc")
    answer = requests.get(
        f"{base}/api/containers/{instance.pk}/logs/?follow=1",
        headers={"Authorization": f"Token {api_token(instance.owner)}"},
        timeout=30,
    )
    assert answer.status_code == 503, answer.text
    assert not Lease.objects.filter(scope="stream").exists(), _leases()
