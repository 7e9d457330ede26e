"""A delivery's one deadline (``webhooks.delivery.post``): connect, send and the answer
all end ``timeout`` after the attempt began, so a receiver that drips its answer a byte
at a time (each byte well within the timeout of one socket wait) cannot hold a worker
for longer. The receivers are raw sockets this test opens on loopback."""

from __future__ import annotations

import socket
import threading

import pytest

from webhooks import addresses, delivery
from webhooks.addresses import url_check

# The real lookup (tests/conftest.py replaces it for every test, after collection).
REAL_LOOKUP = addresses.lookup

pytestmark = pytest.mark.usefixtures("loopback_allowed")

# A complete, valid answer; dripped a byte every DRIP seconds it takes ~12 s to arrive.
ANSWER = b"HTTP/1.1 204 No Content\r\nX-Pad: " + b"a" * 200 + b"\r\nContent-Length: 0\r\n\r\n"
DRIP = 0.05


class Receiver:
    """One connection on a loopback port: reads the request (headers and body), then
    sends ``ANSWER`` in pieces of ``step`` bytes, ``pause`` seconds apart. ``gave_up``
    is set when the client closed the connection before the answer was all sent."""

    def __init__(self, *, step: int, pause: float) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.step, self.pause = step, pause
        self.request = b""
        self.sent = 0
        self.gave_up = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            while b"\r\n\r\n" not in self.request:
                self.request += conn.recv(4096)
            head, _, body = self.request.partition(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            while len(body) < length:
                body += conn.recv(4096)
            try:
                for start in range(0, len(ANSWER), self.step):
                    conn.sendall(ANSWER[start : start + self.step])
                    self.sent = start + self.step
                    if self.done.wait(self.pause):  # the test ended: stop dripping
                        return
            except OSError:
                self.gave_up.set()
                return
            self.done.wait(30)  # the client reads it and closes

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=30)
        self.server.close()


@pytest.fixture
def receiver_factory():
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def _post(port: int, timeout: float) -> delivery.Answer:
    return delivery.post(
        url_check(f"http://127.0.0.1:{port}/hook"),
        body=b'{"type":"t"}',
        message_id="msg_1",
        secrets=["whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        timeout=timeout,
    )


def test_a_receiver_dripping_its_answer_is_cut_off_at_the_deadline(receiver_factory):
    receiver = receiver_factory(step=1, pause=DRIP)
    with pytest.raises(TimeoutError, match="deadline"):
        _post(receiver.port, timeout=0.5)
    assert b"webhook-signature" in receiver.request, receiver.request
    # The answer was still arriving when the client gave up: each byte came within one
    # socket wait, so only the deadline could end it.
    assert receiver.sent < len(ANSWER), (receiver.sent, len(ANSWER))


def test_an_answer_that_arrives_at_once_is_read(receiver_factory):
    receiver = receiver_factory(step=len(ANSWER), pause=0)
    answer = _post(receiver.port, timeout=5)
    assert (answer.status, answer.body) == (204, ""), answer


@pytest.fixture
def stuck_resolver(monkeypatch):
    """The real ``addresses.lookup``, over a ``socket.getaddrinfo`` that blocks until the
    test ends (a resolver that never answers) for names under ``stuck.test`` and refuses
    every other name: no DNS traffic. Yields the event set once a lookup has begun."""
    begun, release = threading.Event(), threading.Event()

    def getaddrinfo(host, *args, **kwargs):
        if not str(host).endswith("stuck.test"):
            raise socket.gaierror(socket.EAI_NONAME, "not looked up in tests")
        begun.set()
        release.wait(10)
        raise socket.gaierror(socket.EAI_AGAIN, "the test's resolver gave up")

    monkeypatch.setattr(addresses, "lookup", REAL_LOOKUP)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield begun
    release.set()


def test_a_resolver_that_never_answers_is_cut_off_at_the_deadline(stuck_resolver):
    from webhooks.errors import WebhookUrlRefused

    with pytest.raises(WebhookUrlRefused, match="did not resolve within the deadline") as refused:
        delivery.post(
            url_check("http://hook.stuck.test/hook"),
            body=b'{"type":"t"}',
            message_id="msg_1",
            secrets=["whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
            timeout=0.5,
        )
    assert refused.value.details.get("unresolved") is True, refused.value.details
    # The lookup had begun and had not ended (it ends when the test does): only the
    # deadline could end the attempt.
    assert stuck_resolver.is_set()


@pytest.mark.django_db
def test_a_delivery_whose_lookup_outlasts_the_deadline_is_retried(stuck_resolver, gobrave_config):
    from django.db import transaction

    from outbox import relay
    from outbox.models import OutboxEvent
    from webhooks.kinds import QUEUE
    from webhooks.models import WebhookEndpoint
    from webhooks.services import webhook_event_emit

    gobrave_config(webhooks={"timeout": 0.5})
    endpoint = WebhookEndpoint.objects.create(
        url="http://hook.stuck.test/hook",
        event_kinds=["request.dead"],
        secrets=[{"secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "expires_at": None}],
    )
    with transaction.atomic():
        webhook_event_emit(kind="request.dead", owner_id=None, data={})
    [(event_id, token)] = relay.claim(QUEUE, 1)
    outcome = relay.execute(event_id, token)
    row = OutboxEvent.objects.get(pk=event_id)
    said = (outcome, row.status, row.attempts, row.last_error)
    assert said[:3] == ("retried", "pending", 1), said
    assert "hook.stuck.test did not resolve within the deadline" in row.last_error, said
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).enabled, said


def test_saving_an_endpoint_waits_for_its_lookup_no_longer_than_the_timeout(
    stuck_resolver, gobrave_config
):
    from webhooks.errors import WebhookUrlRefused

    gobrave_config(webhooks={"timeout": 0.3})
    with pytest.raises(WebhookUrlRefused, match="did not resolve within the deadline"):
        addresses.endpoint_url_check("http://hook.stuck.test/hook")
    assert stuck_resolver.is_set()
