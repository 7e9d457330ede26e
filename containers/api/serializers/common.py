"""What several serializers share: JSON that PostgreSQL can store, text that must be a
string, a template given by id or name, and rendering for the caller (``ForViewer``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


def _no_nul(value: Any, where: str = "") -> None:
    """PostgreSQL cannot store U+0000 in text or jsonb: refuse it here, as a 400."""
    if isinstance(value, str):
        if "\x00" in value:
            raise serializers.ValidationError(
                f"{where or 'value'}: NUL characters are not allowed."
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, where)
            _no_nul(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_nul(item, f"{where}[{index}]")


class StoredJSONField(serializers.JSONField):
    """Any JSON value that PostgreSQL's jsonb can store (the spec cleaners judge the rest)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        _no_nul(value)
        return value


class StrictCharField(serializers.CharField):
    """Text that must be given as a JSON string (DRF's ``CharField`` turns 600 into "600")."""

    default_error_messages = {"not_a_string": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


@extend_schema_field(
    {"oneOf": [{"type": "integer"}, {"type": "string"}], "description": "Template id or name."}
)
class TemplateRefField(serializers.Field):
    """A template id or name (the value is passed on as text; the view resolves it)."""

    default_error_messages = {"invalid": "Give a template id or name."}

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        text = str(data).strip()
        if not text or len(text) > 128 or "\x00" in text:
            self.fail("invalid")
        return text

    def to_representation(self, value: Any) -> Any:
        return value


class ForViewer:
    """Renders for ``context["viewer"]`` (the caller): what users never see is taken out
    (``containers.spec.redaction``). Without a viewer, as for the least privileged."""

    def viewer(self):
        return self.context.get("viewer")
