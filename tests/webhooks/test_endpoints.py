"""Endpoints through the API: secrets shown once, bad input refused with nothing saved,
users scoped to their own endpoints and events, rotation without downtime."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from standardwebhooks.webhooks import Webhook

from outbox.models import OutboxEvent
from tenants.roles import OPERATORS, roles_install
from tests.api.helpers import token_client
from tests.factories import UserFactory
from webhooks.delivery import body_of, signature_header
from webhooks.models import WebhookEndpoint
from webhooks.selectors import live_secrets
from webhooks.services import (
    webhook_endpoint_create,
    webhook_endpoint_rotate,
    webhook_event_emit,
)

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"  # never connected to: nothing here delivers


@pytest.fixture
def operator():
    roles_install()
    user = UserFactory(username="otto", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATORS))
    return token_client(user)


@pytest.fixture
def alice_user():
    return UserFactory(username="alice")


@pytest.fixture
def alice(alice_user):
    return token_client(alice_user)


@pytest.fixture
def bob():
    return token_client(UserFactory(username="bob"))


def test_the_secret_is_answered_at_creation_only(operator, loopback_allowed):
    made = operator.post(
        "/api/webhooks/", {"url": URL, "event_kinds": ["instance.failed"]}, format="json"
    )
    assert made.status_code == 201, made.content
    secret = made.json()["secret"]
    assert secret.startswith("whsec_") and made.json()["owner"] is None
    pk = made.json()["id"]
    for path in ("/api/webhooks/", f"/api/webhooks/{pk}/"):
        answer = operator.get(path)
        assert answer.status_code == 200 and secret not in answer.content.decode()
        assert "secret" not in answer.content.decode().replace("secrets_live", "")


def test_a_refused_url_answers_400_and_saves_nothing(operator):
    answer = operator.post(
        "/api/webhooks/",
        {"url": "https://169.254.169.254/", "event_kinds": ["instance.failed"]},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "webhook_url_refused"
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"url": URL, "event_kinds": ["no.such.kind"]},
        {"url": URL, "event_kinds": []},
        {"url": URL},
        {"url": URL, "event_kinds": ["instance.failed"], "secret": "whsec_mine"},
        {"url": ["x"], "event_kinds": ["instance.failed"]},
    ],
)
def test_bad_input_answers_400_and_saves_nothing(operator, loopback_allowed, body):
    answer = operator.post("/api/webhooks/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert not WebhookEndpoint.objects.exists()


def test_users_may_not_subscribe_unless_the_operator_allows_it(alice, loopback_allowed):
    body = {"url": URL, "event_kinds": ["instance.failed"]}
    refused = alice.post("/api/webhooks/", body, format="json")
    assert refused.status_code == 403, refused.content
    assert not WebhookEndpoint.objects.exists()


def test_a_user_subscribes_for_their_own_and_never_sees_anothers(
    alice, bob, gobrave_config, loopback_allowed
):
    gobrave_config(webhooks={"users_may_subscribe": True})
    body = {"url": URL, "event_kinds": ["instance.failed", "dag_run.finished"]}
    made = alice.post("/api/webhooks/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["owner"] == "alice"
    pk = made.json()["id"]
    assert bob.get(f"/api/webhooks/{pk}/").status_code == 404
    assert bob.get("/api/webhooks/").json()["results"] == []
    assert bob.post(f"/api/webhooks/{pk}/rotate-secret/").status_code == 404
    assert bob.delete(f"/api/webhooks/{pk}/").status_code == 404
    operator_only = alice.post(
        "/api/webhooks/", {"url": URL, "event_kinds": ["engine.unreachable"]}, format="json"
    )
    assert operator_only.status_code == 400, operator_only.content


def test_user_endpoints_get_only_their_own_instances_events(alice_user, loopback_allowed):
    bob_user = UserFactory(username="bob")
    kinds = ["instance.failed", "engine.unreachable"]
    ops = webhook_endpoint_create(url=URL, event_kinds=kinds).endpoint
    mine = webhook_endpoint_create(url=URL, event_kinds=kinds[:1], owner=alice_user).endpoint
    theirs = webhook_endpoint_create(url=URL, event_kinds=kinds[:1], owner=bob_user).endpoint
    with transaction.atomic():
        webhook_event_emit(kind="instance.failed", owner_id=alice_user.pk, data={"n": 1})
        webhook_event_emit(kind="engine.unreachable", owner_id=None, data={"n": 2})
    got = sorted(OutboxEvent.objects.values_list("aggregate_id", "payload__type"))
    assert got == sorted(
        [
            (f"webhook:{ops.pk}", "instance.failed"),
            (f"webhook:{ops.pk}", "engine.unreachable"),
            (f"webhook:{mine.pk}", "instance.failed"),
        ]
    ), f"bob's endpoint #{theirs.pk} must get nothing"


def test_a_disabled_endpoint_gets_no_deliveries(loopback_allowed):
    endpoint = webhook_endpoint_create(url=URL, event_kinds=["request.dead"]).endpoint
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(enabled=False)
    with transaction.atomic():
        assert webhook_event_emit(kind="request.dead", owner_id=None, data={}) == 0


def test_rotation_signs_with_both_secrets_until_the_overlap_ends(gobrave_config, loopback_allowed):
    made = webhook_endpoint_create(url=URL, event_kinds=["request.dead"])
    rotated = webhook_endpoint_rotate(endpoint_id=made.endpoint.pk)
    assert rotated.secret != made.secret
    secrets = live_secrets(WebhookEndpoint.objects.get(pk=made.endpoint.pk))
    assert secrets == [rotated.secret, made.secret]
    body = body_of(kind="request.dead", timestamp="t", data={})
    at = dt.datetime.now(dt.UTC)
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature_header(
            secrets=secrets, message_id="msg_1", at=at, body=body
        ),
    }
    for secret in (made.secret, rotated.secret):  # a receiver on either secret accepts it
        assert Webhook(secret).verify(body, headers)["type"] == "request.dead"

    # With no overlap, the secret a rotation replaces stops signing at once (the first
    # one keeps the overlap it was given when it was replaced).
    gobrave_config(webhooks={"rotation_overlap": 0})
    again = webhook_endpoint_rotate(endpoint_id=made.endpoint.pk)
    assert live_secrets(WebhookEndpoint.objects.get(pk=made.endpoint.pk)) == [
        again.secret,
        made.secret,
    ]


def test_operator_disables_and_enables_an_endpoint_with_the_reason_shown(
    operator, loopback_allowed
):
    pk = webhook_endpoint_create(url=URL, event_kinds=["request.dead"]).endpoint.pk
    off = operator.post(f"/api/webhooks/{pk}/disable/", {"reason": "maintenance"}, format="json")
    assert off.status_code == 200 and off.json()["disabled_reason"] == "maintenance"
    on = operator.post(f"/api/webhooks/{pk}/enable/")
    assert on.json()["enabled"] is True and on.json()["disabled_reason"] == ""
