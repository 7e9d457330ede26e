"""Input and output serializers for the outbox API (read and "retry now"; staff only)."""

from __future__ import annotations

from rest_framework import serializers

from outbox.models import OutboxEvent


class OutboxEventOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutboxEvent
        fields = [
            "id",
            "kind",
            "queue",
            "aggregate_id",
            "payload",
            "status",
            "outcome",
            "attempts",
            "reclaims",
            "available_at",
            "lease_expires_at",
            "claim_token",
            "started_at",
            "last_error",
            "created_at",
            "sent_at",
            "resolved_at",
            "resolved_by",
        ]
        read_only_fields = fields
