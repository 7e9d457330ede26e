"""The token API's bodies: what a user sends to make a token, and what they see of one."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from core.api.input import InputSerializer
from tenants.models import NAME_MAX, ApiToken


class TokenInputSerializer(InputSerializer):
    name = serializers.CharField(max_length=NAME_MAX, help_text="What the token is for, e.g. ci.")
    expiry = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When the token stops working (ISO 8601, in the future); absent: never.",
    )


class TokenOutputSerializer(serializers.ModelSerializer):
    """A token as its owner sees it: never the key, which is stored nowhere."""

    prefix = serializers.CharField(
        source="token_key", help_text="The key's first characters, to tell tokens apart."
    )
    expired = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created", "expiry", "expired", "last_used"]
        read_only_fields = fields

    def get_expired(self, token: ApiToken) -> bool:
        return token.expired(timezone.now())


class TokenCreatedSerializer(TokenOutputSerializer):
    """A new token, with its key: this answer is the only time the key is shown."""

    key = serializers.SerializerMethodField(
        help_text="Send it as `Authorization: Token <key>`. Shown this once; keep it safe."
    )

    class Meta(TokenOutputSerializer.Meta):
        fields = [*TokenOutputSerializer.Meta.fields, "key"]
        read_only_fields = fields

    def get_key(self, token: ApiToken) -> str:
        return self.context["key"]
