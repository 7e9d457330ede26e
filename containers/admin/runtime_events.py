"""The engines' history (``RuntimeEvent``) as an admin list: health changes, cordons,
decommissions, enabled and capacity changes, with actor and reason; never edited.

Seen by those with ``containers.view_runtimeevent`` (operators and viewers). The same
entries are in the events feed (``GET /api/events/?source=engine``) and its export.
"""

from __future__ import annotations

from django.contrib import admin

from containers.models import RuntimeEvent
from core.admin_helpers import ReadOnlyAdminMixin
from core.admin_lists import FlatChangelistMixin, choices_filter, id_filter, value_filter


@admin.register(RuntimeEvent)
class RuntimeEventAdmin(FlatChangelistMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Kept after the runtime row is deleted (its name is on each entry)."""

    list_display = (
        "created_at",
        "runtime_name",
        "kind",
        "from_status",
        "to_status",
        "actor",
        "message",
    )
    list_filter = (
        choices_filter("kind", lambda: RuntimeEvent.Kind.choices, title="kind"),
        value_filter("runtime_name", title="runtime"),
        # A runtime's own entries, whatever its name was or is (its page's "history"
        # link): a renamed runtime keeps them, a new one reusing a name gets none of its
        # predecessor's. Read on the ``rtevent_history`` index.
        id_filter("runtime_id", title="runtime id"),
        value_filter("actor", title="actor"),
        "created_at",
    )
    search_fields = ("runtime_name", "message")
