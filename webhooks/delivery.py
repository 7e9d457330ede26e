"""One signed HTTP POST to one endpoint: the Standard Webhooks headers and the request.

The request goes through ``addresses.open_socket`` (checked address, pinned for the
connection). One deadline, ``timeout`` after the attempt began, bounds all of it: the
name's lookup, the connect, the TLS handshake, the send and every read of the answer,
each wait being only what is left of it, so a receiver that drips its answer a byte at
a time holds a worker no longer than a silent one (``TimeoutError``), nor does a DNS
server that never answers. Of the answer only the
status line, the headers and the first ``KEEP_ANSWER`` bytes of the body are read.
Redirects are never followed (a 3xx is a failed attempt, its ``Location`` named).
Nothing here writes to the database.
"""

from __future__ import annotations

import datetime as dt
import http.client
import io
import json
import socket
import ssl
import time
from dataclasses import dataclass

from standardwebhooks.webhooks import Webhook

from webhooks.addresses import Target, open_socket

USER_AGENT = "gobrave-webhooks/1"
KEEP_ANSWER = 512  # characters of an error answer kept as the reason


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    retry_after: float  # seconds, 0 when the answer gave none
    location: str


def body_of(*, kind: str, timestamp: str, data: dict) -> bytes:
    """The JSON body, as Standard Webhooks lays it out: ``type``, ``timestamp``, ``data``."""
    return json.dumps(
        {"type": kind, "timestamp": timestamp, "data": data}, separators=(",", ":")
    ).encode()


def signature_header(*, secrets: list[str], message_id: str, at: dt.datetime, body: bytes) -> str:
    """``webhook-signature``: one ``v1,<base64>`` per secret, space-separated (a receiver
    that knows any one of them accepts it: rotation without downtime)."""
    return " ".join(Webhook(s).sign(message_id, at, body) for s in secrets)


class Deadline:
    """A ``time.monotonic()`` instant; ``left()`` is the next socket wait (never more
    than what remains), ``TimeoutError`` once it has passed."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete answer within the delivery's deadline")
        return left


class _DeadlineReader(io.RawIOBase):
    """The answer's bytes from ``sock``, each wait bounded by what is left of the
    deadline (http.client reads the status line and headers a line at a time: a
    receiver dripping bytes would otherwise restart the socket's timeout on each)."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.sock.settimeout(self.deadline.left())
        try:
            return self.sock.recv_into(buffer)
        except TimeoutError:
            self.deadline.left()  # the deadline's own words, if that is what ended it
            raise


class _DeadlineSocket:
    """What ``HTTPResponse`` asks of its socket (``makefile``), reading by the deadline."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self.sock, self.deadline = sock, deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline))


class _Connection(http.client.HTTPConnection):
    def __init__(self, target: Target, deadline: Deadline) -> None:
        super().__init__(target.host, target.port, timeout=deadline.left())
        self.target, self.deadline = target, deadline

    def connect(self) -> None:
        self.sock = open_socket(
            self.target, timeout=self.deadline.left(), deadline=self.deadline.at
        )

    def send(self, data) -> None:
        if self.sock is None:
            self.connect()
        self.sock.settimeout(self.deadline.left())  # sendall's timeout bounds all of it
        super().send(data)

    def response_class(self, sock, **kwargs) -> http.client.HTTPResponse:
        return http.client.HTTPResponse(_DeadlineSocket(sock, self.deadline), **kwargs)


class _TlsConnection(_Connection):
    def connect(self) -> None:
        super().connect()
        context = ssl.create_default_context()
        self.sock.settimeout(self.deadline.left())  # the handshake's waits
        self.sock = context.wrap_socket(self.sock, server_hostname=self.target.host)


def _retry_after(value: str | None) -> float:
    try:
        return min(max(float(value or 0), 0.0), 3600.0)
    except ValueError:
        return 0.0


def post(
    target: Target, *, body: bytes, message_id: str, secrets: list[str], timeout: float
) -> Answer:
    """POST ``body`` to ``target`` signed with every one of ``secrets``; the answer,
    all of it within ``timeout`` seconds of the call (lookup, connect, send, answer).

    Raises ``OSError`` (``TimeoutError`` past the deadline; and
    ``http.client.HTTPException``) for no answer, and ``addresses``'
    ``WebhookUrlRefused`` for an address it may not reach or a name that does not
    resolve (``unresolved`` in its details; also one not resolved by the deadline).
    """
    deadline = Deadline(timeout)
    at = dt.datetime.now(dt.UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature_header(
            secrets=secrets, message_id=message_id, at=at, body=body
        ),
    }
    kind = _TlsConnection if target.scheme == "https" else _Connection
    connection = kind(target, deadline)
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        text = response.read(KEEP_ANSWER).decode(errors="replace")
        return Answer(
            status=response.status,
            body=text,
            retry_after=_retry_after(response.getheader("retry-after")),
            location=(response.getheader("location") or "")[:200],
        )
    finally:
        connection.close()
