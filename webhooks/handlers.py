"""The outbox handler of a delivery (kind ``WebhookDelivery`` on the ``webhooks`` queue).

Per endpoint, deliveries run one at a time in the order they were made (the outbox's
per-aggregate order, aggregate ``webhook:<endpoint id>``); the outbox retries a failed one
with backoff and jitter (``outbox.max_attempts``, ``backoff_base``, ``backoff_cap``) and
makes it a dead letter after the last attempt. The ``webhook-id`` header is the same on
every attempt of one delivery, so a receiver that keeps the ids it saw takes each once.
"""

from __future__ import annotations

import http.client
import logging

from django.conf import settings

from outbox import conf, registry
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import PermanentFailure, RetryLater
from webhooks import delivery
from webhooks.addresses import url_check
from webhooks.errors import WebhookUrlRefused
from webhooks.kinds import DELIVERY_KIND, QUEUE
from webhooks.models import WebhookEndpoint
from webhooks.selectors import live_secrets
from webhooks.services import webhook_delivered, webhook_delivery_dead

log = logging.getLogger(__name__)


def wait_limit() -> float:
    """Seconds one delivery attempt may take in all (the name's lookup, connect, send and
    the answer, a deadline ``delivery.post`` enforces on the lookup and every socket wait):
    ``webhooks.timeout``, and
    never above a third of ``outbox.delivery_timeout`` (the handler's whole budget)."""
    return min(settings.GOBRAVE["webhooks"]["timeout"], conf.value("delivery_timeout") / 3)


def deliver(event: OutboxEvent) -> Outcome:
    """POST the delivery to its endpoint, signed with the endpoint's live secrets.

    1. The endpoint is gone or disabled: finished unsent (superseded).
    2. The URL is checked again (form, resolved addresses, the peer connected to): a
       refused address is a permanent failure (dead at once), a name that does not
       resolve (or not within ``wait_limit()``) is retried.
    3. A 2xx answer: sent, and the endpoint's failure streak resets. Any other answer
       (a redirect is never followed), or none complete within ``wait_limit()``: retried
       (a ``Retry-After`` is the backoff's floor).
    """
    payload = event.payload
    endpoint = WebhookEndpoint.objects.filter(pk=payload["endpoint"]).first()
    if endpoint is None or not endpoint.enabled:
        return Outcome.SUPERSEDED
    body = delivery.body_of(
        kind=payload["type"], timestamp=payload["timestamp"], data=payload["data"]
    )
    try:
        answer = delivery.post(
            url_check(endpoint.url),
            body=body,
            message_id=payload["message_id"],
            secrets=live_secrets(endpoint),
            timeout=wait_limit(),
        )
    except WebhookUrlRefused as exc:
        if exc.details.get("unresolved"):
            raise RetryLater(exc.message) from None
        raise PermanentFailure(exc.message) from None
    except (OSError, http.client.HTTPException) as exc:
        raise RetryLater(f"no answer from the endpoint: {exc or type(exc).__name__}") from None
    log.info(
        "webhook delivery #%s %s to endpoint %s: HTTP %s",
        event.id,
        payload["message_id"],
        endpoint.pk,
        answer.status,
    )
    if 200 <= answer.status < 300:
        webhook_delivered(endpoint_id=endpoint.pk)
        return Outcome.SENT
    if 300 <= answer.status < 400:
        raise RetryLater(f"HTTP {answer.status}: redirect to {answer.location!r} not followed")
    raise RetryLater(
        f"HTTP {answer.status}: {answer.body.strip()[:200]}", retry_after=answer.retry_after
    )


def on_dead(event: OutboxEvent, reason: str) -> None:
    """A delivery went dead: counted on its endpoint, which is disabled after
    ``webhooks.disable_after`` in a row (``services.webhook_delivery_dead``)."""
    webhook_delivery_dead(endpoint_id=event.payload["endpoint"], reason=reason)


def register() -> None:
    registry.register_queue(QUEUE, settings.GOBRAVE_WEBHOOKS_WORKERS)
    registry.register(DELIVERY_KIND, queue=QUEUE, handler=deliver, on_dead=on_dead)
