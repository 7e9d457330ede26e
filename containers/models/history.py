"""The append-only histories: of an instance (``ContainerEvent``) and of an engine
(``RuntimeEvent``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.write_order import txid_field


class ContainerEvent(models.Model):
    """Append-only history of an instance: requests, transitions, runtime events.

    Keeps the instance's uuid and name as plain values (no foreign key), so the history
    survives the instance's deletion; ``owner`` is the instance's owner, kept the same way
    (no database constraint: deleting a user never touches the history), so an owner
    sees the history of their deleted instances too (``GET /api/events/``). Empty for
    entries of no instance (an orphan container, a leftover removed). ``txid`` is the
    writing transaction (``core.write_order``): the events feed's order.
    Never updated; deleted by gobrave only by retention, and only for instances that are
    gone (``retention.deleted_instance_history``, off by default).
    """

    instance_id = models.UUIDField(db_index=True)
    instance_name = models.CharField(max_length=128)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    kind = models.CharField(max_length=64, db_index=True)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True, db_index=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    txid = txid_field()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # An instance's history page, newest first, however long the history.
            models.Index(fields=["instance_id", "created_at", "id"], name="event_instance_history"),
            # The events feed (events.selectors) in its order, and one per filter.
            models.Index(fields=["txid", "id"], name="event_feed"),
            models.Index(fields=["owner", "txid", "id"], name="event_feed_owner"),
            models.Index(fields=["instance_id", "txid", "id"], name="event_feed_instance"),
            models.Index(fields=["kind", "txid", "id"], name="event_feed_kind"),
            models.Index(fields=["actor", "txid", "id"], name="event_feed_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.instance_name}: {self.kind} {self.from_status}->{self.to_status}"


class RuntimeEvent(models.Model):
    """Append-only history of an engine (a ``Runtime`` row): added, its settings changed
    (how it is reached, labels...), deleted; its health changes (reachable
    again, unreachable), cordon and uncordon, decommission, enabled and disabled, and
    capacity changes, each with who did it (``actor``: ``user:<name>``, ``monitor``...)
    and why (``message``).

    Written only by ``containers.runtime_history.runtime_event_record``, inside the
    transaction that makes the change, so a change and its entry commit together or not
    at all. Keeps the runtime's id and name as plain values (no foreign key): the history
    outlives the row. Entries concern no one owner's instances: the events feed shows them
    to those who see the engines (``containers.view_runtime``). ``txid`` is the writing
    transaction (``core.write_order``): the events feed's order. Never updated.
    """

    class Kind(models.TextChoices):
        # The health changes have the names of their webhooks (``webhooks.kinds``).
        UNREACHABLE = "engine.unreachable", "engine unreachable"
        REACHABLE = "engine.reachable", "engine reachable again"
        CORDONED = "engine.cordoned", "engine cordoned"
        UNCORDONED = "engine.uncordoned", "engine uncordoned"
        DECOMMISSIONING = "engine.decommissioning", "engine decommission begun"
        DECOMMISSIONED = "engine.decommissioned", "engine decommissioned"
        ENABLED = "engine.enabled", "engine enabled"
        DISABLED = "engine.disabled", "engine disabled"
        CAPACITY = "engine.capacity", "engine capacity changed"
        ADDED = "engine.added", "engine added"
        CHANGED = "engine.changed", "engine settings changed"
        DELETED = "engine.deleted", "engine deleted"

    runtime_id = models.BigIntegerField(help_text="The runtime's id (the row may be gone).")
    runtime_name = models.CharField(max_length=64)
    kind = models.CharField(max_length=64, choices=Kind.choices)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    txid = txid_field()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # A runtime's history, newest first.
            models.Index(fields=["runtime_id", "created_at", "id"], name="rtevent_history"),
            # The events feed (events.selectors) in its order, and one per filter.
            models.Index(fields=["txid", "id"], name="rtevent_feed"),
            models.Index(fields=["kind", "txid", "id"], name="rtevent_feed_kind"),
            models.Index(fields=["actor", "txid", "id"], name="rtevent_feed_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.runtime_name}: {self.kind}"
