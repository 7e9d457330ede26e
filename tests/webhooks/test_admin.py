"""The admin's webhook endpoints: checked like the API, the secret shown once."""

from __future__ import annotations

import pytest
from django.urls import reverse

from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db

ADD = reverse("admin:webhooks_webhookendpoint_add")


def test_a_private_url_is_refused_on_the_form_and_nothing_saved(admin_client):
    answer = admin_client.post(
        ADD, {"url": "https://10.0.0.8/hook", "event_kinds": ["request.dead"]}
    )
    assert answer.status_code == 200  # the form again, with the reason
    assert b"not a public address" in answer.content
    assert not WebhookEndpoint.objects.exists()


def test_the_secret_is_shown_once_in_the_message_and_on_no_page(admin_client, loopback_allowed):
    answer = admin_client.post(
        ADD, {"url": "http://127.0.0.1:9/hook", "event_kinds": ["request.dead", "limit.hit"]}
    )
    assert answer.status_code == 302, answer.content.decode()[-2000:]
    endpoint = WebhookEndpoint.objects.get()
    [secret] = [s["secret"] for s in endpoint.secrets]
    changelist = reverse("admin:webhooks_webhookendpoint_changelist")
    assert secret in admin_client.get(changelist).content.decode()  # the message, once
    pages = [
        reverse("admin:webhooks_webhookendpoint_changelist"),
        reverse("admin:webhooks_webhookendpoint_change", args=[endpoint.pk]),
        reverse("admin:webhooks_webhookendpoint_history", args=[endpoint.pk]),
    ]
    for page in pages:
        content = admin_client.get(page).content.decode()
        assert secret not in content, page
