"""The API's input serializers: a body may hold only the fields the serializer declares.

DRF drops unknown keys without a word, so a misspelt field (``envv``) would be accepted
and ignored. ``InputSerializer`` refuses them instead: HTTP 400 (``invalid``), each
unknown key named in ``details`` beside any other field's error. Every serializer that
reads a request body derives from it; query-string serializers do not (pagination and
other parameters share the query string).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

UNKNOWN_FIELD = "Unknown field."


class InputSerializer(serializers.Serializer):
    def to_internal_value(self, data: Any) -> Any:
        unknown: list[str] = []
        if isinstance(data, Mapping):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(key) for key in data if key not in writable)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                exc.detail.update({name: [UNKNOWN_FIELD] for name in unknown})
            raise
        if unknown:
            raise serializers.ValidationError({name: [UNKNOWN_FIELD] for name in unknown})
        return value
