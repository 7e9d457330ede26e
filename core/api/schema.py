"""The OpenAPI documentation every viewset's reads share (drf-spectacular), and the
operation ids generated clients name their functions after.

A ``list`` answers a page of its output serializer, or 400 for a bad query or page; a
``retrieve`` answers one row, or 404. ``list_and_retrieve`` writes both entries of an
``extend_schema_view`` so each viewset names only its serializers and summaries.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular import openapi
from drf_spectacular.utils import extend_schema

from core.api.errors import error_responses


def list_and_retrieve(
    output: Any,
    *,
    list_summary: str,
    retrieve_summary: str,
    query: Any = None,
    detail: Any = None,
) -> dict[str, Any]:
    """``list`` and ``retrieve`` for ``extend_schema_view``: a page of ``output`` (filtered
    by the ``query`` serializer, if any) and one ``detail`` (``output`` unless named)."""
    return {
        "list": extend_schema(
            summary=list_summary,
            parameters=[query] if query is not None else None,
            responses={200: output(many=True), **error_responses(400)},
        ),
        "retrieve": extend_schema(
            summary=retrieve_summary,
            responses={200: detail or output, **error_responses(404)},
        ),
    }


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's schema, with operation ids that read as what they do.

    A viewset's own action (``@action``: stop, logs, events) is named by its path alone,
    ``containers_stop`` and ``containers_logs``, not by the HTTP method's verb glued on
    (``containers_stop_create``, ``containers_logs_retrieve``); list, retrieve, create,
    update and destroy keep drf-spectacular's names (``containers_list``).
    """

    def get_operation_id(self) -> str:
        extra = getattr(self.view, "get_extra_actions", None)
        own = {action.__name__ for action in extra()} if extra is not None else set()
        if getattr(self.view, "action", None) in own:
            return "_".join(token.replace("-", "_") for token in self._tokenize_path())
        return super().get_operation_id()
