"""Reads of the webhooks app (no network I/O)."""

from __future__ import annotations

from django.db.models import QuerySet

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
