"""Input and output serializers of ``/api/webhooks/``. No output holds a secret, except
the one answer that makes it (``EndpointWithSecretSerializer``: creation, rotation)."""

from __future__ import annotations

from rest_framework import serializers

from core.api.input import InputSerializer
from webhooks.kinds import EventKind
from webhooks.models import WebhookEndpoint
from webhooks.selectors import live_secrets


class EndpointInputSerializer(InputSerializer):
    url = serializers.CharField(max_length=2000)
    event_kinds = serializers.ListField(
        child=serializers.ChoiceField(choices=[k.value for k in EventKind]),
        min_length=1,
        max_length=len(EventKind),
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)


class DisableInputSerializer(InputSerializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)


class EndpointOutputSerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    secrets_live = serializers.SerializerMethodField(
        help_text="How many secrets sign each delivery now (2 during a rotation's overlap)."
    )

    class Meta:
        model = WebhookEndpoint
        fields = [
            "id",
            "url",
            "event_kinds",
            "owner",
            "description",
            "enabled",
            "disabled_reason",
            "failure_streak",
            "secrets_live",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_secrets_live(self, endpoint: WebhookEndpoint) -> int:
        return len(live_secrets(endpoint))


class EndpointWithSecretSerializer(EndpointOutputSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="The signing secret: shown in this answer only, never again."
    )

    class Meta(EndpointOutputSerializer.Meta):
        fields = [*EndpointOutputSerializer.Meta.fields, "secret"]
        read_only_fields = fields
