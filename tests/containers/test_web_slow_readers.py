"""Clients that open streams and then read nothing, on the real web server (gunicorn with
uvicorn's workers) against the real Docker Engine: they must not stall the web tier.

A stalled client is a raw socket with a small receive buffer that never reads; once its
buffers and the server's are full, the server's write of the next chunk waits. Two
servers, each with 5 streams per user:

- ``patient``: leases of 240 s, so a client may stall for 80 s (a third of a lease)
  before it is dropped: long enough to look at the server while the streams are held;
- ``strict``: leases of 3 s, so a client that stalls is dropped after 1 s.

The stalled streams are instance pages (``<id>/stream/``), whose output has no byte
bound. (A follow, ``logs/?follow=1``, is cut at 1 MiB, which the kernel's send buffer
of a loopback connection, up to 4 MiB, takes whole: the follow ends and gives its place
back however little its client reads.) The container prints long numbered lines (16,000
bytes each): what it printed is counted from the engine's last line, not from what the
server passed on.
"""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import uuid
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.test import Client

from core.models import Lease
from tests.containers.conftest import IMAGE
from tests.containers.test_web_streams import (
    _engine_connections,
    _instance_on,
    _leases,
    _web_pids,
)
from tests.factories import UserFactory, api_token
from tests.processes import running_app, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.docker]

PER_USER = 5
LINE = 16_000  # below Docker's 16 KiB, so one line is one log entry
PAD = f'x=$(head -c {LINE} /dev/zero | tr "\\0" x); i=0'
FAST = f'{PAD}; while true; do echo "$i $x"; i=$((i+1)); done'  # tens of MB/s
# What the server may hold for a stalled client is a few socket and read buffers; the
# test waits until the engine holds this much more output, and asks that the server grew
# by less than a quarter of it (holding what the 5 stalled pages were not sent: 5 times it).
PRINTED = 64 * 1024 * 1024
TCP_CLOSE = 7  # tcpi_state of a connection that was reset or closed


def _server(django_db_blocker, tmp_path_factory, lease_seconds: int):
    with (
        django_db_blocker.unblock(),
        running_app(
            tmp_path_factory.mktemp("web"),
            streams_per_user=PER_USER,
            streams_lease_seconds=lease_seconds,
        ) as app,
    ):
        yield app, app.web(DATABASE_POOL_MAX="10")


@pytest.fixture(scope="module")
def patient(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _server(django_db_blocker, tmp_path_factory, lease_seconds=240)


@pytest.fixture(scope="module")
def strict(django_db_setup, django_db_blocker, tmp_path_factory):
    yield from _server(django_db_blocker, tmp_path_factory, lease_seconds=3)


def _container(docker_client, script: str) -> str:
    log_config = {"Type": "json-file", "Config": {"max-size": "16m", "max-file": "2"}}
    container = docker_client.create_container(
        IMAGE,
        ["sh", "-c", script],
        name=f"gb-test-slow-{uuid.uuid4().hex[:8]}",
        host_config=docker_client.create_host_config(log_config=log_config),
    )
    docker_client.start(container["Id"])
    return container["Id"]


@pytest.fixture
def fast_printer(docker_client):
    """A container that prints 16,000-byte lines as fast as it can (its log rotates at
    16 MB), for one test."""
    container_id = _container(docker_client, FAST)
    yield container_id
    docker_client.remove_container(container_id, force=True)


def _last_line(docker_client, container_id: str) -> int:
    """The number of the container's last line, as the engine holds it."""
    last = docker_client.logs(container_id, tail=1).split(b" ", 1)[0]
    return int(last) if last.isdigit() else -1


class Viewer:
    """A superuser with an API token and a console session: both kinds of stream."""

    def __init__(self) -> None:
        self.user = UserFactory(is_staff=True, is_superuser=True)
        self.token = api_token(self.user)
        client = Client()
        client.force_login(self.user)
        self.cookie = client.cookies[settings.SESSION_COOKIE_NAME].value

    def follow(self, instance_id, tail: int = 1) -> tuple[str, dict]:
        path = f"/api/containers/{instance_id}/logs/?follow=1&tail={tail}"
        return path, {"Authorization": f"Token {self.token}"}

    def page(self, instance_id) -> tuple[str, dict]:
        path = f"/admin/containers/containerinstance/{instance_id}/stream/"
        return path, {"Cookie": f"{settings.SESSION_COOKIE_NAME}={self.cookie}"}

    def leases(self) -> int:
        return Lease.objects.filter(scope="stream", holder=f"user:{self.user.pk}").count()


class Stalled:
    """A client that asks for a stream, then reads nothing: its receive buffer is small
    and fills up, and the server's write of the next chunk waits."""

    def __init__(self, port: int, path: str, headers: dict) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(60)
        self.sock.connect(("127.0.0.1", port))
        lines = [
            f"GET {path} HTTP/1.1",
            "Host: 127.0.0.1",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())

    def status(self) -> bytes:
        """The response's status line, peeked (nothing is read off the socket)."""
        return self.sock.recv(15, socket.MSG_PEEK)

    def dropped(self) -> bool:
        """Whether the server reset the connection (seen without reading)."""
        info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        return struct.unpack("B", info[:1])[0] == TCP_CLOSE

    def port(self) -> int:
        return self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def _unsent(port: int, clients: list[Stalled]) -> dict[int, int]:
    """Per client (by its port), the bytes the server's side of its connection holds
    unsent (``ss``'s Send-Q): more than nothing once the client's window is full."""
    listed = subprocess.run(
        ["ss", "-tnH", "state", "established", "sport", "=", f":{port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    unsent = {}
    for line in listed.splitlines():
        _, send_q, _, peer = line.split()[:4]
        unsent[int(peer.rsplit(":", 1)[1])] = int(send_q)
    return {client.port(): unsent.get(client.port(), 0) for client in clients}


def _rss(app) -> int:
    """The resident memory of the web processes together, in bytes."""
    total = 0
    for pid in _web_pids(app):
        status = Path(f"/proc/{pid}/status").read_text()
        total += int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) * 1024
    return total


def _stall(port: int, streams: list[tuple[str, dict]]) -> list[Stalled]:
    stalled = [Stalled(port, path, headers) for path, headers in streams]
    for client in stalled:  # each stream has started (a 429 or an error would say so)
        status = client.status()
        assert status.startswith(b"HTTP/1.1 200"), status
    return stalled


def _released(app, viewer: Viewer) -> None:
    wait_for(
        lambda: viewer.leases() == 0,
        timeout=30,
        message="every stream's lease is released",
        describe=_leases,
    )
    wait_for(
        lambda: _engine_connections(app) == 0,
        timeout=30,
        message="every engine connection of the streams is closed",
        describe=lambda: f"{_engine_connections(app)} engine connections open",
    )


def _sees_new_lines(base: str, viewer: Viewer, instance_id, after: int) -> None:
    """A follower that reads: it gets lines numbered after ``after``."""
    path, headers = viewer.follow(instance_id)
    with requests.get(base + path, headers=headers, stream=True, timeout=(30, 60)) as response:
        assert response.status_code == 200, response.text
        text = ""
        for chunk in response.iter_content(chunk_size=None):
            text += chunk.decode(errors="replace")
            numbers = [int(n) for n in re.findall(r"(?:^|\n)(\d+) x", text)]
            if numbers and max(numbers) > after:
                return
            text = text[-LINE * 2 :]
    raise AssertionError(f"the follow ended before a line after {after}: {text[-200:]!r}")


def test_stalled_streams_hold_their_places_and_buffer_nothing_while_the_api_answers(
    patient, fast_printer, docker_client
):
    app, port = patient
    base = f"http://127.0.0.1:{port}"
    viewer = Viewer()
    instance = _instance_on(fast_printer, owner=viewer.user)
    stalled = _stall(port, [viewer.page(instance.pk)] * PER_USER)
    try:
        wait_for(
            lambda: all(_unsent(port, stalled).values()),
            timeout=30,
            message="the server holds unsent output for every stalled client",
            describe=lambda: f"unsent bytes per client: {_unsent(port, stalled)}",
        )
        assert viewer.leases() == PER_USER, _leases()
        # The stalled streams still count: the user's sixth is refused.
        path, headers = viewer.follow(instance.pk)
        refused = requests.get(base + path, headers=headers, timeout=30)
        assert refused.status_code == 429, refused.text[:300]
        # The API answers the same user and another one.
        stranger = Viewer()
        for who in (viewer, stranger):
            answer = requests.get(
                f"{base}/api/containers/",
                headers={"Authorization": f"Token {who.token}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text[:300]
        # A follower that reads gets the new lines.
        other = _instance_on(fast_printer, owner=stranger.user)
        _sees_new_lines(base, stranger, other.pk, after=_last_line(docker_client, fast_printer))
        # The server does not keep what the stalled clients do not take.
        rss, first = _rss(app), _last_line(docker_client, fast_printer)
        wait_for(
            lambda: (_last_line(docker_client, fast_printer) - first) * LINE >= PRINTED,
            timeout=60,
            message=f"the container prints {PRINTED} bytes more",
        )
        printed = (_last_line(docker_client, fast_printer) - first) * LINE
        grown = _rss(app) - rss
        assert grown < printed / 4, (
            f"the web processes grew by {grown} bytes (from {rss}) while the container "
            f"printed {printed} bytes to {len(stalled)} stalled clients"
        )
        assert viewer.leases() == PER_USER, _leases()
    finally:
        for client in stalled:
            client.close()
    _released(app, viewer)


def test_a_client_that_reads_nothing_is_dropped_and_its_streams_given_back(strict, fast_printer):
    """On ``strict`` a stalled client is dropped after a third of a 3 s lease: its
    connection is reset, its lease released and its engine connection closed, while the
    client still holds its socket."""
    app, port = strict
    viewer = Viewer()
    instance = _instance_on(fast_printer, owner=viewer.user)
    stalled = _stall(port, [viewer.page(instance.pk)] * 2)
    try:
        wait_for(
            lambda: all(client.dropped() for client in stalled),
            timeout=30,
            message="the server drops every stalled client",
            describe=lambda: (
                f"dropped: {[client.dropped() for client in stalled]}, "
                f"leases: {_leases()}\n{app.logs(30)}"
            ),
        )
        _released(app, viewer)
        assert "Exception in ASGI application" not in app.logs(200), app.logs(200)
    finally:
        for client in stalled:
            client.close()
