"""Signed deliveries end to end: a receiver this test starts on loopback (the test's
configuration allows loopback and http), the real dispatcher and webhooks cluster, and
PostgreSQL. The receiver verifies every delivery with ``standardwebhooks``."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from outbox.models import OutboxEvent
from tests.processes import free_port, outbox_rows, running_app, wait_for
from webhooks.models import WebhookEndpoint
from webhooks.services import webhook_endpoint_create, webhook_endpoint_rotate, webhook_event_emit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CONFIG = {
    "outbox_poll_interval": "0.2",
    "outbox_backoff_base": "0.1",
    "outbox_backoff_cap": "0.3",
    "outbox_max_attempts": "5",  # two fail while the receiver is down: three to spare
    "queue_poll": "0.05",
    "webhooks_allow_http": "true",
    "webhooks_allow_private": "true",
    "webhooks_timeout": "0.3",
    "webhooks_disable_after": "2",
}


class Receiver:
    """An HTTP receiver on a fixed loopback port that can be stopped and started again.
    It records, per delivery, its webhook-id, its body and which known secrets verify it
    (answering 204 when one does, 400 when none does)."""

    def __init__(self, port: int) -> None:
        self.port, self.secrets, self.seen = port, [], []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = dict(self.headers.items())
                verified = []
                for secret in list(receiver.secrets):
                    try:
                        Webhook(secret).verify(body, headers)
                        verified.append(secret)
                    except WebhookVerificationError:
                        pass
                with receiver.lock:
                    receiver.seen.append((headers["webhook-id"], json.loads(body), verified))
                self.send_response(204 if verified else 400)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def sequence(self) -> list[int]:
        """Each delivery's ``seq``, once per webhook-id, in the order first received."""
        with self.lock:
            firsts = {}
            for message_id, body, _ in self.seen:
                firsts.setdefault(message_id, body["data"]["seq"])
            return list(firsts.values())


def emit(seq: int) -> None:
    with transaction.atomic():
        webhook_event_emit(kind="request.dead", owner_id=None, data={"seq": seq})


def rows_of(endpoint: WebhookEndpoint):
    return OutboxEvent.objects.filter(aggregate_id=f"webhook:{endpoint.pk}").order_by("id")


def test_signed_deliveries_arrive_in_order_after_downtime_and_a_silent_endpoint_is_disabled(
    tmp_path, loopback_allowed
):
    receiver = Receiver(free_port())
    receiver.start()
    silent = socket.socket()  # listens, never accepts: a request is never answered
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        kinds = ["request.dead"]
        made = webhook_endpoint_create(
            url=f"http://127.0.0.1:{receiver.port}/hook", event_kinds=kinds
        )
        receiver.secrets.append(made.secret)
        dead_end = webhook_endpoint_create(
            url=f"http://127.0.0.1:{silent.getsockname()[1]}/hook", event_kinds=kinds
        ).endpoint
        with running_app(tmp_path, **CONFIG) as app:
            app.dispatcher()
            app.cluster("webhooks")
            for seq in range(3):
                emit(seq)
            wait_for(
                lambda: receiver.sequence() == [0, 1, 2],
                timeout=20,
                message="three deliveries",
                describe=lambda: f"{receiver.sequence()}\n{outbox_rows(rows_of(made.endpoint))}",
            )

            receiver.stop()  # down for a while: two failed attempts
            emit(3)
            emit(4)
            waiting = rows_of(made.endpoint).filter(payload__data__seq=3)
            wait_for(
                lambda: waiting.filter(attempts__gte=2, status="pending").exists(),
                timeout=20,
                message="the delivery retried while the receiver is down",
                describe=lambda: outbox_rows(rows_of(made.endpoint)),
            )
            rotated = webhook_endpoint_rotate(endpoint_id=made.endpoint.pk)
            receiver.secrets.append(rotated.secret)
            receiver.start()
            wait_for(
                lambda: receiver.sequence() == [0, 1, 2, 3, 4],
                timeout=20,
                message="every delivery, in order, after the receiver came back",
                describe=lambda: f"{receiver.sequence()}\n{outbox_rows(rows_of(made.endpoint))}",
            )

            wait_for(
                lambda: (
                    not WebhookEndpoint.objects.get(pk=dead_end.pk).enabled
                    and not rows_of(dead_end).filter(status__in=["pending", "processing"]).exists()
                ),
                timeout=30,
                message="the silent endpoint disabled and its rows finished",
                describe=lambda: outbox_rows(rows_of(dead_end)),
            )
    finally:
        receiver.stop()
        silent.close()

    sent = list(rows_of(made.endpoint).values_list("payload", "status", "outcome"))
    assert [(p["data"]["seq"], status, outcome) for p, status, outcome in sent] == [
        (seq, "sent", "sent") for seq in range(5)
    ]
    assert max(rows_of(made.endpoint).values_list("attempts", flat=True)) >= 2
    ids = {p["message_id"] for p, _, _ in sent}
    assert {message_id for message_id, _, _ in receiver.seen} == ids  # webhook-id: the row's
    for message_id, body, verified in receiver.seen:
        assert made.secret in verified, (message_id, body)
        if body["data"]["seq"] >= 3:  # signed after the rotation: both secrets verify it
            assert rotated.secret in verified, (message_id, body)
        assert body["type"] == "request.dead"

    dead_end.refresh_from_db()
    assert "2 deliveries in a row went dead" in dead_end.disabled_reason, dead_end.disabled_reason
    outcomes = list(rows_of(dead_end).values_list("status", "outcome"))
    assert outcomes[:2] == [("dead", "dead"), ("dead", "dead")], outcomes
    assert set(outcomes[2:]) == {("sent", "superseded")}, outcomes  # never sent once disabled
