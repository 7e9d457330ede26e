"""The API's defaults (``REST_FRAMEWORK`` settings): a bounded paginator and a JSON parser.

Both exist so that no input turns into a 500: DRF's ``LimitOffsetPagination`` passes any
``offset`` through (PostgreSQL refuses an OFFSET beyond bigint), and its ``JSONParser``
lets a too deeply nested document escape as ``RecursionError``. Here both are 400s.
"""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser as DRFJSONParser


class JSONParser(DRFJSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply") from None


MAX_OFFSET = 10**9


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500

    def _bounded(self, request, name: str, default: int | None, upper: int) -> int | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        if not (raw.isascii() and raw.isdigit()) or int(raw) > upper:
            raise serializers.ValidationError(
                {name: [f"Must be a whole number from 0 to {upper}."]}
            )
        return int(raw)

    def get_limit(self, request) -> int | None:
        limit = self._bounded(request, self.limit_query_param, self.default_limit, self.max_limit)
        return limit or self.default_limit

    def get_offset(self, request) -> int:
        return self._bounded(request, self.offset_query_param, 0, MAX_OFFSET)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: (0, self.max_limit),
            self.offset_query_param: (0, MAX_OFFSET),
        }
        for parameter in parameters:
            low, high = bounds[parameter["name"]]
            parameter["schema"].update({"minimum": low, "maximum": high})
        return parameters


def exclude_schema_views(endpoints):
    """drf-spectacular preprocessing hook: document the API, not the schema's own views."""
    return [
        (path, regex, method, view)
        for path, regex, method, view in endpoints
        if not path.startswith(("/api/schema/", "/api/docs/"))
    ]
