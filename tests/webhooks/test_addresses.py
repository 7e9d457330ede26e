"""URL validation: refused by default before any connection is made (no socket opened),
after DNS resolution and again at delivery time (so a rebound name cannot be a probe)."""

from __future__ import annotations

import socket

import pytest
from django.db import transaction

from outbox.registry import PermanentFailure
from webhooks import addresses
from webhooks.errors import WebhookUrlRefused
from webhooks.handlers import deliver
from webhooks.models import WebhookEndpoint
from webhooks.services import webhook_endpoint_create, webhook_event_emit

REFUSED_BY_DEFAULT = [
    "https://127.0.0.1/hook",
    "https://localhost/hook",  # a name that resolves to loopback
    "https://10.1.2.3/hook",
    "https://172.16.0.9/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
    "https://100.64.0.1/hook",  # shared address space
    "https://0.0.0.0/hook",
    "https://[::1]/hook",
    "https://[fe80::1]/hook",
    "https://[fc00::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "https://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of the link-local metadata address
    "https://[2002:a9fe:a9fe::1]/hook",  # 6to4 of it
    "https://[::7f00:1]/hook",  # IPv4-compatible loopback
    "https://224.0.0.1/hook",  # multicast
]


@pytest.fixture
def no_sockets(monkeypatch):
    """Every socket the address module would open is recorded (and refused): a refusal
    must come before any of them."""
    opened: list[tuple] = []

    def refuse(*args, **kwargs):
        opened.append(args)
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(addresses.socket, "socket", refuse)
    return opened


@pytest.mark.parametrize("url", REFUSED_BY_DEFAULT)
def test_private_loopback_and_link_local_addresses_are_refused_before_any_connection(
    url, no_sockets
):
    with pytest.raises(WebhookUrlRefused, match="not a public address"):
        addresses.endpoint_url_check(url)
    with pytest.raises(WebhookUrlRefused, match="not a public address"):
        addresses.open_socket(addresses.url_check(url), timeout=1)
    assert no_sockets == []


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://203.0.113.5/hook", "scheme must be https"),
        ("ftp://203.0.113.5/hook", "scheme must be https"),
        ("https://user:pw@203.0.113.5/hook", "user name or password"),
        ("https:///hook", "no host"),
        ("https://203.0.113.5:99999/", "not a valid URL"),
        ("https://exa mple.com/", "spaces"),
        ("", "1-2000 characters"),
    ],
)
def test_malformed_or_plain_http_urls_are_refused_with_the_reason(url, words, no_sockets):
    with pytest.raises(WebhookUrlRefused, match=words):
        addresses.endpoint_url_check(url)
    assert no_sockets == []


def test_a_public_literal_address_passes_without_any_connection(no_sockets):
    target = addresses.endpoint_url_check("https://93.184.215.14:8443/in?x=1")
    assert (target.host, target.port, target.path) == ("93.184.215.14", 8443, "/in?x=1")
    assert no_sockets == []


def test_the_operator_may_allow_http_and_private_addresses(gobrave_config):
    gobrave_config(webhooks={"allow_http": True, "allow_private": True})
    assert addresses.endpoint_url_check("http://localhost:9/x").host == "localhost"


@pytest.mark.django_db
def test_a_name_rebound_to_loopback_after_creation_is_refused_at_delivery_before_connecting(
    monkeypatch, no_sockets
):
    """Created while the name resolved to a public address; at delivery it resolves to
    127.0.0.1: the delivery is a permanent failure and no socket was ever opened."""
    answers = iter(
        [
            [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 443))],
            [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 443))],
        ]
    )
    monkeypatch.setattr(addresses, "lookup", lambda *a, **k: next(answers))
    made = webhook_endpoint_create(url="https://rebind.test/hook", event_kinds=["request.dead"])
    with transaction.atomic():
        webhook_event_emit(kind="request.dead", owner_id=None, data={})
    from outbox.models import OutboxEvent

    event = OutboxEvent.objects.get(aggregate_id=f"webhook:{made.endpoint.pk}")
    with pytest.raises(PermanentFailure, match="127.0.0.1, which is not a public address"):
        deliver(event)
    assert no_sockets == []
    assert WebhookEndpoint.objects.get(pk=made.endpoint.pk).enabled  # one dead is no streak


def test_a_name_that_does_not_resolve_is_refused_at_creation(no_sockets):
    with pytest.raises(WebhookUrlRefused, match="does not resolve"):
        addresses.endpoint_url_check("https://nowhere.test/hook")
    assert no_sockets == []


@pytest.mark.django_db
def test_a_delivery_to_a_name_that_stopped_resolving_is_retried_not_dead(no_sockets):
    from outbox.models import OutboxEvent
    from outbox.registry import RetryLater

    endpoint = WebhookEndpoint.objects.create(
        url="https://gone.test/hook", event_kinds=["request.dead"], secrets=[]
    )
    with transaction.atomic():
        webhook_event_emit(kind="request.dead", owner_id=None, data={})
    event = OutboxEvent.objects.get(aggregate_id=f"webhook:{endpoint.pk}")
    with pytest.raises(RetryLater, match="does not resolve"):
        deliver(event)
    assert no_sockets == []
