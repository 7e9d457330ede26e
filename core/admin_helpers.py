"""Admin pieces used by several apps: status badges, actions-only and read-only admins.

Nothing here registers a model; each app's ``admin.py`` imports what it shows.
"""

from __future__ import annotations

from django.utils.html import format_html

GREY = "#6c757d"


def badge(text: str, colour: str, *, title: str = ""):
    """A small coloured label (statuses, image status, engine health)."""
    return format_html(
        '<span class="gb-badge" title="{}" style="background:{};color:#fff;padding:2px 8px;'
        'border-radius:10px;font-size:11px;font-weight:600;white-space:nowrap">{}</span>',
        title,
        colour,
        text,
    )


def first_line(text: str, limit: int = 120) -> str:
    """The last non-empty line of ``text`` (a traceback's message), cut to ``limit``."""
    line = next((part for part in reversed(text.strip().splitlines()) if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


class ActionsOnlyAdminMixin:
    """No delete view, no bulk delete, and pages that only show: a change happens only
    through the admin's actions (which call services). The changelist-level change
    permission still gates those actions."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


class ReadOnlyAdminMixin:
    """Rows gobrave writes and operators only read: no add, change or delete."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
