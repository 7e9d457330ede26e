"""Writes of the webhooks app: endpoints (create, change, rotate, enable, disable, delete),
events turned into deliveries, and a delivery's outcome on its endpoint.

Every write of ``WebhookEndpoint`` is here. Secrets leave this module only in the result of
``webhook_endpoint_create`` and ``webhook_endpoint_rotate`` (shown once) and are never
logged.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import secrets as random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from core.models import Counter
from outbox.services import Enqueued, outbox_enqueue_many
from webhooks.addresses import endpoint_url_check
from webhooks.errors import WebhookInvalid, WebhookNotFound
from webhooks.kinds import DELIVERY_KIND, OPERATOR_ONLY, EventKind, aggregate_of
from webhooks.models import WebhookEndpoint, WebhookNotice
from webhooks.selectors import secret_expired

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WithSecret:
    """An endpoint and its new secret, the one time the secret is shown."""

    endpoint: WebhookEndpoint
    secret: str


def _config() -> dict:
    return settings.GOBRAVE["webhooks"]


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(random.token_bytes(32)).decode()


def check_kinds(event_kinds: Iterable[str], *, operator: bool) -> list[str]:
    """The kinds, once each, if all are known and the endpoint may receive them."""
    kinds = list(dict.fromkeys(event_kinds))
    known = set(EventKind)
    unknown = [k for k in kinds if k not in known]
    if not kinds or unknown:
        raise WebhookInvalid(
            f"event_kinds must name one or more of {', '.join(EventKind)}"
            + (f"; unknown: {', '.join(map(str, unknown))}" if unknown else ""),
            field="event_kinds",
        )
    only = [k for k in kinds if k in OPERATOR_ONLY]
    if only and not operator:
        raise WebhookInvalid(
            f"only operators' endpoints receive {', '.join(only)}", field="event_kinds"
        )
    return kinds


def webhook_endpoint_create(
    *, url: str, event_kinds: Iterable[str], owner=None, description: str = ""
) -> WithSecret:
    """Check the URL (form and resolved addresses, ``webhooks.addresses``) and the kinds,
    then save a new enabled endpoint with a new secret. ``owner`` None: an operator's
    endpoint. Returns the endpoint and its secret (shown once). Nothing is saved when a
    check fails."""
    endpoint_url_check(url)
    kinds = check_kinds(event_kinds, operator=owner is None)
    secret = new_secret()
    endpoint = WebhookEndpoint.objects.create(
        url=url,
        event_kinds=kinds,
        owner=owner,
        description=description[:200],
        secrets=[{"secret": secret, "created_at": timezone.now().isoformat(), "expires_at": None}],
    )
    log.info("webhook endpoint %s created for %s", endpoint.pk, owner or "operators")
    return WithSecret(endpoint=endpoint, secret=secret)


def _locked(endpoint_id: int) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.select_for_update().filter(pk=endpoint_id).first()
    if endpoint is None:
        raise WebhookNotFound(f"no webhook endpoint {endpoint_id}", id=endpoint_id)
    return endpoint


def webhook_endpoint_update(
    *,
    endpoint_id: int,
    url: str | None = None,
    event_kinds: Iterable[str] | None = None,
    description: str | None = None,
) -> WebhookEndpoint:
    """Change an endpoint's URL, kinds or description (each checked as at creation),
    under its row lock. Nothing changes when a check fails."""
    with transaction.atomic():
        endpoint = _locked(endpoint_id)
        fields = ["updated_at"]
        if url is not None:
            endpoint_url_check(url)
            endpoint.url = url
            fields.append("url")
        if event_kinds is not None:
            endpoint.event_kinds = check_kinds(event_kinds, operator=endpoint.owner_id is None)
            fields.append("event_kinds")
        if description is not None:
            endpoint.description = description[:200]
            fields.append("description")
        endpoint.save(update_fields=fields)
    return endpoint


def webhook_endpoint_rotate(*, endpoint_id: int) -> WithSecret:
    """Give the endpoint a new secret, under its row lock; returns it (shown once).

    The secrets it had keep signing until ``webhooks.rotation_overlap`` from now (each
    delivery carries one signature per live secret), so a receiver can switch to the new
    secret at any time in that window without missing a delivery. Expired secrets are
    dropped.
    """
    now = timezone.now()
    until = (now + dt.timedelta(seconds=_config()["rotation_overlap"])).isoformat()
    secret = new_secret()
    with transaction.atomic():
        endpoint = _locked(endpoint_id)
        kept = [
            {**s, "expires_at": s["expires_at"] or until}
            for s in endpoint.secrets
            if not secret_expired(s, now)
        ]
        endpoint.secrets = [
            {"secret": secret, "created_at": now.isoformat(), "expires_at": None},
            *kept,
        ]
        endpoint.save(update_fields=["secrets", "updated_at"])
    log.info("webhook endpoint %s: secret rotated (%s older still sign)", endpoint_id, len(kept))
    return WithSecret(endpoint=endpoint, secret=secret)


def webhook_endpoint_enable(*, endpoint_id: int) -> WebhookEndpoint:
    """Enable the endpoint again: its reason and failure streak are cleared. Idempotent."""
    with transaction.atomic():
        endpoint = _locked(endpoint_id)
        endpoint.enabled, endpoint.disabled_reason, endpoint.failure_streak = True, "", 0
        endpoint.save(update_fields=["enabled", "disabled_reason", "failure_streak", "updated_at"])
    return endpoint


def webhook_endpoint_disable(*, endpoint_id: int, reason: str) -> WebhookEndpoint:
    """Disable the endpoint with ``reason``: its waiting deliveries finish unsent
    (superseded) and no new ones are made. Idempotent (the first reason stays)."""
    with transaction.atomic():
        endpoint = _locked(endpoint_id)
        if endpoint.enabled:
            endpoint.enabled, endpoint.disabled_reason = False, reason[:2000]
            endpoint.save(update_fields=["enabled", "disabled_reason", "updated_at"])
    return endpoint


def webhook_endpoint_delete(*, endpoint_id: int) -> None:
    """Delete the endpoint; its waiting deliveries then finish unsent (superseded)."""
    with transaction.atomic():
        _locked(endpoint_id).delete()


def webhook_event_emit(*, kind: EventKind, owner_id: int | None, data: dict[str, Any]) -> int:
    """Write one delivery (an outbox row) per enabled endpoint subscribed to ``kind`` that
    may see it: every operator's endpoint, and the endpoints of ``owner_id`` (the owner of
    the instance or run the event is about; None for an event of no one's).

    Must run inside the transaction that makes the event, so the deliveries commit or roll
    back with it. Locks the audience's endpoint rows (in id order) until then, so the
    deliveries of one endpoint commit in id order, the order the relay delivers them in.
    Returns how many rows it wrote (usually 0).
    """
    return webhook_events_emit(kind=kind, events=[(owner_id, data)])


def webhook_events_emit(*, kind: EventKind, events: list[tuple[int | None, dict[str, Any]]]) -> int:
    """``webhook_event_emit`` of many events of one kind (``(owner_id, data)`` each, in
    order): one statement locks their audiences' endpoints (the union, in id order), one
    writes their deliveries. Returns how many rows it wrote."""
    if not connection.in_atomic_block:
        raise RuntimeError("webhook_event_emit() must run inside transaction.atomic()")
    if not events:
        return 0
    owners = (
        {owner_id for owner_id, _ in events if owner_id is not None}
        if kind not in OPERATOR_ONLY
        else set()
    )
    audience = Q(owner__isnull=True)
    if owners:
        audience |= Q(owner_id__in=sorted(owners))
    # The kinds are matched here, not in SQL: a JSON "contains" is PostgreSQL's only (the
    # quick start runs on SQLite), and the enabled endpoints are few.
    candidates = WebhookEndpoint.objects.filter(audience, enabled=True)
    # The whole audience is locked, in id order, whatever the kind: two emits of one
    # transaction (a dead letter, then its instance failed) then take a superset of the
    # same rows in the same order as any other transaction, never a cycle of waits.
    locked = list(
        candidates.order_by("pk").select_for_update().values_list("pk", "owner_id", "event_kinds")
    )
    subscribed = [(pk, owner) for pk, owner, kinds in locked if kind in kinds]
    stamp = timezone.now().isoformat()
    rows = [
        Enqueued(
            aggregate_id=aggregate_of(endpoint_id),
            payload={
                "endpoint": endpoint_id,
                "message_id": f"msg_{uuid.uuid4().hex}",
                "type": str(kind),
                "timestamp": stamp,
                "data": data,
            },
        )
        for owner_id, data in events
        for endpoint_id, owner in subscribed
        if owner is None or (owner == owner_id and kind not in OPERATOR_ONLY)
    ]
    outbox_enqueue_many(kind=DELIVERY_KIND, rows=rows)
    return len(rows)


def webhook_delivered(*, endpoint_id: int) -> None:
    """A delivery was answered 2xx: the endpoint's failure streak starts again at 0."""
    WebhookEndpoint.objects.filter(pk=endpoint_id, failure_streak__gt=0).update(failure_streak=0)


def webhook_delivery_dead(*, endpoint_id: int, reason: str) -> None:
    """A delivery went dead: count it on its endpoint; at ``webhooks.disable_after`` in a
    row, disable the endpoint with the reason. Runs in the dead letter's transaction."""
    limit = _config()["disable_after"]
    WebhookEndpoint.objects.filter(pk=endpoint_id).update(failure_streak=F("failure_streak") + 1)
    endpoint = WebhookEndpoint.objects.filter(pk=endpoint_id).first()
    if endpoint is None or not endpoint.enabled or endpoint.failure_streak < limit:
        return
    endpoint.enabled = False
    endpoint.disabled_reason = (
        f"disabled after {endpoint.failure_streak} deliveries in a row went dead; "
        f"the last: {reason}"
    )[:2000]
    endpoint.save(update_fields=["enabled", "disabled_reason", "updated_at"])
    log.warning("webhook endpoint %s disabled: %s", endpoint_id, endpoint.disabled_reason)


def webhook_limit_hits_notify(*, counter: str, kind: EventKind = EventKind.LIMIT_HIT) -> bool:
    """Send one ``kind`` notice if the counter ``counter`` (refused creates) grew in the
    period that just ended (``webhooks.limit_interval``), once per period whoever calls
    it: a unique row per kind and period is the claim. Idempotent; a scheduled task.

    The refusals themselves roll their transactions back, so they cannot enqueue: the
    counter (bumped after the refusal) is what is read. Returns True if it sent.
    """
    interval = _config()["limit_interval"]
    now = timezone.now().timestamp()
    end = dt.datetime.fromtimestamp(now - now % interval, tz=dt.UTC)
    start = end - dt.timedelta(seconds=interval)
    counted = (
        Counter.objects.filter(name=counter, minute__gte=start, minute__lt=end).aggregate(
            n=Sum("count")
        )["n"]
        or 0
    )
    if not counted:
        return False
    with transaction.atomic():
        notice, made = WebhookNotice.objects.get_or_create(
            kind=str(kind), period=start, defaults={"count": counted}
        )
        if not made:
            return False
        webhook_event_emit(
            kind=kind,
            owner_id=None,
            data={
                "counter": counter,
                "count": counted,
                "from": start.isoformat(),
                "to": end.isoformat(),
            },
        )
    return True
