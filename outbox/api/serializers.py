"""Input and output serializers for the outbox API (read and "retry now"; staff only)."""

from __future__ import annotations

from rest_framework import serializers

from outbox.models import OutboxEvent, OutboxStatus


class OutboxQuerySerializer(serializers.Serializer):
    """Filters and ordering of ``GET /api/outbox/``."""

    status = serializers.MultipleChoiceField(
        choices=OutboxStatus.choices,
        required=False,
        help_text="One or more statuses (repeat the parameter).",
    )
    kind = serializers.CharField(required=False, max_length=64)
    queue = serializers.CharField(required=False, max_length=32)
    aggregate_id = serializers.CharField(required=False, max_length=64)
    ordering = serializers.ChoiceField(
        choices=["id", "-id", "available_at", "-available_at"],
        required=False,
        help_text="Sort field, '-' for descending (default: -id, newest first).",
    )


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
        ]
        read_only_fields = fields
