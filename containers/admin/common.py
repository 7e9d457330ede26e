"""What the containers admin's pages share: who acts (``actor_of``), lists in messages,
an action that removes rows' things from their engines (``remove_each``), JSON blocks,
the redaction of secret values, and the outbox's link from a container request to its
instance's history."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import messages
from django.utils.html import format_html

from containers.actors import user_actor
from containers.admin.display import history_url
from containers.spec import redaction
from core.errors import DomainError
from outbox import admin as outbox_admin


def listed(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    count = f"{len(items)} instance{'s' if len(items) != 1 else ''}"
    return f"{count}: {shown}{more}"


def actor_of(request) -> str:
    return user_actor(request.user)


def remove_each(
    model_admin,
    request,
    rows: Iterable[Any],
    *,
    remove: Callable[[Any], Any],
    name: Callable[[Any], str],
    plural: str,
) -> None:
    """An admin action's removals (orphan containers, workspaces): ``remove`` each row
    (its service: an engine call, bounded, outside any transaction); a refusal is an
    error message with its reason (``"<name>: not removed: why"``), the others one
    success message (``"Removed 2 <plural>."``)."""
    removed = 0
    for row in rows:
        try:
            remove(row)
        except DomainError as exc:
            model_admin.message_user(
                request, f"{name(row)}: not removed: {exc.message}", messages.ERROR
            )
            continue
        removed += 1
    if removed:
        model_admin.message_user(request, f"Removed {removed} {plural}.", messages.SUCCESS)


@outbox_admin.register_history_link
def _outbox_history_link(event) -> str | None:
    """Outbox rows of container requests link to their instance's history."""
    return history_url(event.aggregate_id) if event.kind.startswith("Container") else None


_page = threading.local()  # the user a change page is being drawn for (one per thread)


class RedactedFieldsMixin:
    """Fields that can hold secret env values or host paths are drawn, for a viewer who may
    not see them, through ``containers.spec.redaction`` (the rule the API applies):
    ``redacted_fields`` maps each such field to the display method that replaces it."""

    redacted_fields: dict[str, str] = {}

    def redacts(self, request, obj) -> bool:
        return not (redaction.sees_secrets(request.user) and redaction.sees_hosts(request.user))

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not self.redacts(request, obj):
            return fieldsets
        swap = self.redacted_fields
        return [
            (name, {**opts, "fields": tuple(swap.get(f, f) for f in opts["fields"])})
            for name, opts in fieldsets
        ]

    def get_readonly_fields(self, request, obj=None):
        return (*super().get_readonly_fields(request, obj), *self.redacted_fields.values())

    @staticmethod
    def page_user():
        """The user the change page is being drawn for (``None`` outside one)."""
        return getattr(_page, "user", None)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        _page.user = request.user
        try:
            return super().change_view(request, object_id, form_url, extra_context)
        finally:
            _page.user = None


def json_block(value) -> str:
    return format_html(
        '<pre style="white-space:pre-wrap">{}</pre>', json.dumps(value, indent=2, sort_keys=True)
    )
