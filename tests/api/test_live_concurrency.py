"""maxPending over real HTTP: 200 simultaneous POSTs against a live server, limit 50.

Real clients (one thread and one TCP connection each, released together by a barrier)
against the ASGI live server (uvicorn, tests/asgi_server.py), whose request threads take
their database connections from the psycopg pool (at most ``DATABASE_POOL_MAX`` per process)
and give them back after every request. Exactly 50 are accepted and 150 refused with 429 and
a ``Retry-After`` of at least one second; the database holds exactly 50 instances and 50
outbox rows."""

from __future__ import annotations

from collections import Counter

import pytest
import requests

from containers.models import ContainerEvent, ContainerInstance
from outbox.models import OutboxEvent
from tests.factories import UserFactory, api_token
from tests.processes import released_at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

CALLERS = 200
LIMIT = 50
USERS = 10


def test_200_simultaneous_posts_admit_exactly_50(
    live_server, postgres, gobrave_config, template, fake_runtime
):
    # Exact admission: the throttles are off, so only maxPending answers.
    gobrave_config(
        container={"create_queue_max_pending": LIMIT},
        api={"throttle_create": None, "throttle_write": None},
    )
    # The live server (uvicorn on the ASGI application) listens with a backlog of 2048,
    # as production does, so 200 connections opened at once are all queued.
    tokens = [api_token(UserFactory(username=f"client{i}")) for i in range(USERS)]
    url = f"{live_server.url}/api/containers/"

    def call(index: int) -> tuple[int, str | None, str]:
        headers = {"Authorization": f"Token {tokens[index % USERS]}"}
        try:
            response = requests.post(
                url, json={"template": "sleeper"}, headers=headers, timeout=(60, 120)
            )
            body = response.json()
            code = body["error"]["code"] if "error" in body else body["status"]
            return (response.status_code, response.headers.get("Retry-After"), code)
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            return (0, None, repr(exc))

    answers = released_at_once(call, CALLERS, timeout=180)

    statuses = Counter(status for status, _, _ in answers)
    assert len(answers) == CALLERS
    assert statuses == {202: LIMIT, 429: CALLERS - LIMIT}, [a for a in answers if a[0] == 0][:3]
    assert {code for status, _, code in answers if status == 202} == {"pending"}
    refused = [(retry, code) for status, retry, code in answers if status == 429]
    assert {code for _, code in refused} == {"queue_full"}
    assert all(retry is not None and int(retry) >= 1 for retry, _ in refused)
    assert ContainerInstance.objects.count() == LIMIT
    assert ContainerInstance.objects.filter(status="pending").count() == LIMIT
    assert OutboxEvent.objects.count() == LIMIT
    assert ContainerEvent.objects.count() == LIMIT
