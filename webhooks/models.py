"""Webhook endpoints: where signed event notices go. Deliveries are outbox rows
(kind ``WebhookDelivery`` on the ``webhooks`` queue, aggregate ``webhook:<id>``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class WebhookEndpoint(models.Model):
    """An HTTPS URL subscribed to event kinds (``webhooks.kinds.EventKind``).

    ``owner``: a user's endpoint receives the events of that user's own instances and DAG
    runs only; no owner (``NULL``) is an operator's endpoint, which receives every event of
    its kinds. ``secrets``: the signing secrets, newest first, each
    ``{"secret", "created_at", "expires_at"}`` (``expires_at`` set on the old ones by a
    rotation: until then they sign too). Shown once, when made; never by any page, answer,
    log line or history row (``editable=False``: no form holds them).

    ``failure_streak``: deliveries in a row that went dead; at ``webhooks.disable_after``
    the endpoint is disabled with ``disabled_reason``; a delivered one resets it.
    Written only by ``webhooks.services``.
    """

    url = models.CharField(max_length=2000)
    event_kinds = models.JSONField(default=list, help_text="The event kinds it receives.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="webhook_endpoints",
        help_text="Empty: an operator's endpoint, receiving every event of its kinds.",
    )
    description = models.CharField(max_length=200, blank=True)
    secrets = models.JSONField(default=list, editable=False)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True)
    failure_streak = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "webhook endpoint"
        indexes = [models.Index(fields=["enabled", "owner"], name="webhook_enabled_owner")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.url}"


class WebhookNotice(models.Model):
    """One "limit hit" notice per kind and period: the unique key makes the scheduled
    task send at most one per ``webhooks.limit_interval``, whatever runs it at once."""

    kind = models.CharField(max_length=64)
    period = models.DateTimeField(help_text="The start of the period it covers.")
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "period"], name="webhook_notice_once")
        ]

    def __str__(self) -> str:
        return f"{self.kind} @ {self.period}"
