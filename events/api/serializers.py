"""The events API's query (validated, unknown parameters refused) and its entries."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json

from rest_framework import serializers

from containers.models import RuntimeEvent
from containers.queues import event_kind_display
from containers.spec import redaction
from dags.history import dag_event_kind_display
from events.selectors import DAG_RUN, ENGINE, INSTANCE, SOURCES, Entry, Position

MAX_CURSOR_LENGTH = 200
MAX_LIMIT = 500
_INVALID = "Invalid cursor: use the `next` link or the `cursor` value as they are."


def cursor_encode(position: Position) -> str:
    raw = json.dumps([position.txid, position.source, position.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_decode(text: str) -> Position:
    """A cursor back into a position; ``ValidationError`` (HTTP 400) for anything else."""
    if len(text) > MAX_CURSOR_LENGTH or not text.isascii():
        raise serializers.ValidationError(_INVALID)
    try:
        values = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        raise serializers.ValidationError(_INVALID) from None
    if not (
        isinstance(values, list)
        and len(values) == 3
        and all(type(v) is int for v in values)
        and -1 <= values[0] < 2**63
        and -1 <= values[1] < len(SOURCES)
        and 0 <= values[2] < 2**63
    ):
        raise serializers.ValidationError(_INVALID)
    return Position(*values)


class CursorField(serializers.CharField):
    def to_internal_value(self, data) -> Position:
        return cursor_decode(super().to_internal_value(data))


class UTCDateTimeField(serializers.DateTimeField):
    """ISO 8601, turned into UTC here (PostgreSQL refuses offsets Python accepts)."""

    def to_internal_value(self, value):
        moment = super().to_internal_value(value)
        try:
            return moment.astimezone(dt.UTC)
        except OverflowError:
            raise serializers.ValidationError("Out of range.") from None


class EventsQuerySerializer(serializers.Serializer):
    """The query string of ``GET /api/events/``; a parameter it does not name is refused."""

    cursor = CursorField(  # its length is checked by the decoding
        required=False,
        help_text="Where the page starts: the `cursor` (or `next`) of an earlier page.",
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_LIMIT, help_text="Entries per page (50)."
    )
    instance = serializers.UUIDField(required=False, help_text="One instance's history.")
    dag_run = serializers.UUIDField(required=False, help_text="One DAG run's history.")
    owner = serializers.CharField(
        required=False, max_length=150, help_text="The owner's username or id."
    )
    kind = serializers.CharField(required=False, max_length=64, help_text="An event kind.")
    actor = serializers.CharField(
        required=False, max_length=150, help_text="Who acted: user:<name>, worker, policy..."
    )
    created_after = UTCDateTimeField(required=False, help_text="At or after (ISO 8601).")
    created_before = UTCDateTimeField(required=False, help_text="Before (ISO 8601).")
    source = serializers.ChoiceField(
        required=False,
        choices=SOURCES,
        help_text="Only one source's entries: instances', DAG runs' or engines' (engines: "
        "only for callers with view_runtime).",
    )

    def to_internal_value(self, data):
        # ``format`` is DRF's own (the browsable API's ``?format=json``).
        unknown = sorted(key for key in data if key not in self.fields and key != "format")
        if unknown:
            raise serializers.ValidationError({key: ["Unknown parameter."] for key in unknown})
        return super().to_internal_value(data)

    def validate(self, attrs):
        if attrs.get("instance") and attrs.get("dag_run"):
            raise serializers.ValidationError({"dag_run": ["Give instance or dag_run, not both."]})
        return attrs


_KIND_WORDS = {
    INSTANCE: event_kind_display,
    DAG_RUN: dag_event_kind_display,
    ENGINE: lambda kind: dict(RuntimeEvent.Kind.choices).get(kind, kind),
}


def entry_data(entry: Entry, *, viewer) -> dict:
    """One entry as the API and the export show it (host paths and engine addresses taken
    out of ``message`` and ``data`` for a viewer who may not see them)."""
    row = entry.row
    instance, engine = entry.source == INSTANCE, entry.source == ENGINE
    data = {
        "source": entry.source,
        "id": row.id,
        "kind": row.kind,
        "kind_display": _KIND_WORDS[entry.source](row.kind),
        "instance_id": str(row.instance_id) if instance else None,
        "instance_name": row.instance_name if instance else None,
        "dag_run_id": str(row.run_id) if entry.source == DAG_RUN else None,
        "node": row.node if entry.source == DAG_RUN else None,
        "runtime_id": row.runtime_id if engine else None,
        "runtime_name": row.runtime_name if engine else None,
        "owner": None if engine or not row.owner_id or not row.owner else row.owner.get_username(),
        "actor": row.actor,
        "from_status": row.from_status,
        "to_status": row.to_status,
        "message": row.message,
        "data": row.data,
        "created_at": row.created_at.isoformat().replace("+00:00", "Z"),
    }
    if viewer is not False and not redaction.sees_hosts(viewer):
        data["message"] = redaction.scrub(data["message"])
        data["data"] = redaction.scrub_data(data["data"])
    return data


class FeedEntrySerializer(serializers.Serializer):
    """The schema of one entry (``entry_data`` renders it)."""

    source = serializers.ChoiceField(choices=SOURCES)
    id = serializers.IntegerField(help_text="The entry's id in its source's table.")
    kind = serializers.CharField()
    kind_display = serializers.CharField()
    instance_id = serializers.UUIDField(allow_null=True)
    instance_name = serializers.CharField(allow_null=True)
    dag_run_id = serializers.UUIDField(allow_null=True)
    node = serializers.CharField(allow_null=True, help_text="A DAG node's key; blank: the run.")
    runtime_id = serializers.IntegerField(
        allow_null=True, help_text="An engine's entry: its runtime's id (the row may be gone)."
    )
    runtime_name = serializers.CharField(allow_null=True, help_text="An engine's entry: its name.")
    owner = serializers.CharField(allow_null=True, help_text="Null for an engine's entry.")
    actor = serializers.CharField()
    from_status = serializers.CharField()
    to_status = serializers.CharField()
    message = serializers.CharField()
    data = serializers.JSONField()
    created_at = serializers.DateTimeField()


class EventsPageSerializer(serializers.Serializer):
    next = serializers.URLField(
        allow_null=True, help_text="The next page, when more entries are ready now; else null."
    )
    cursor = serializers.CharField(
        help_text="The position after this page's last entry: ask again with it later to "
        "read what was committed since (nothing is missed or repeated)."
    )
    results = FeedEntrySerializer(many=True)
