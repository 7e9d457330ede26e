"""One signed HTTP POST to one endpoint: the Standard Webhooks headers and the request.

The request goes through ``addresses.open_socket`` (checked address, pinned for the
connection), with ``webhooks.timeout`` for the connect and again for each wait on the
answer; redirects are never followed (a 3xx is a failed attempt, its ``Location``
named). Nothing here writes to the database.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import ssl
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


class _Connection(http.client.HTTPConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.target = target

    def connect(self) -> None:
        self.sock = open_socket(self.target, timeout=self.timeout)


class _TlsConnection(_Connection):
    def connect(self) -> None:
        super().connect()
        context = ssl.create_default_context()
        self.sock = context.wrap_socket(self.sock, server_hostname=self.target.host)


def _retry_after(value: str | None) -> float:
    try:
        return min(max(float(value or 0), 0.0), 3600.0)
    except ValueError:
        return 0.0


def post(
    target: Target, *, body: bytes, message_id: str, secrets: list[str], timeout: float
) -> Answer:
    """POST ``body`` to ``target`` signed with every one of ``secrets``; the answer.

    Raises ``OSError`` (and ``http.client.HTTPException``) for no answer, and
    ``addresses``' ``WebhookUrlRefused`` for an address it may not reach.
    """
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
    connection = kind(target, timeout)
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
