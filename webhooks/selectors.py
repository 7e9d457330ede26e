"""Reads of the webhooks app (no network I/O)."""

from __future__ import annotations

import datetime as dt

from django.db.models import QuerySet
from django.utils import timezone

from webhooks.models import WebhookEndpoint

SEE_ALL = "webhooks.view_webhookendpoint"
MANAGE_ALL = "webhooks.change_webhookendpoint"


def webhook_endpoints_visible(*, user) -> QuerySet[WebhookEndpoint]:
    """Every endpoint for a holder of ``view_webhookendpoint`` (operators, viewers);
    a user's own endpoints for anyone else."""
    rows = WebhookEndpoint.objects.select_related("owner").order_by("pk")
    return rows if user.has_perm(SEE_ALL) else rows.filter(owner=user)


def webhook_endpoint_manageable(*, user, endpoint_id: int) -> WebhookEndpoint | None:
    """The endpoint if ``user`` may change it (an operator: any; a user: their own)."""
    rows = WebhookEndpoint.objects.filter(pk=endpoint_id)
    if not user.has_perm(MANAGE_ALL):
        rows = rows.filter(owner=user)
    return rows.first()


def live_secrets(endpoint: WebhookEndpoint) -> list[str]:
    """The secrets that sign a delivery now: the newest and those not yet expired."""
    now = timezone.now()
    return [s["secret"] for s in endpoint.secrets if not secret_expired(s, now)]


def secret_expired(entry: dict, now) -> bool:
    """True once a rotated-out secret's ``expires_at`` has passed."""
    return bool(entry["expires_at"]) and dt.datetime.fromisoformat(entry["expires_at"]) <= now
