"""A delivery's one deadline (``webhooks.delivery.post``): connect, send and the answer
all end ``timeout`` after the attempt began, so a receiver that drips its answer a byte
at a time (each byte well within the timeout of one socket wait) cannot hold a worker
for longer. The receivers are raw sockets this test opens on loopback."""

from __future__ import annotations

import socket
import threading

import pytest

from webhooks import delivery
from webhooks.addresses import url_check

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
