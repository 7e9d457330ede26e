"""The API's defaults (``REST_FRAMEWORK`` settings): paginator and JSON parser.

Each exists so that no input turns into a 500: DRF's ``LimitOffsetPagination`` passes
any ``offset`` through (PostgreSQL refuses an OFFSET beyond bigint), its ``JSONParser``
lets a too deeply nested document escape as ``RecursionError``. Here they are 400s
(the authentication classes that refuse malformed keys live in ``tenants.authentication``).
"""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser as DRFJSONParser


def _refuse_unencodable(value) -> None:
    """Lone surrogates (``"\\ud800"``) are valid JSON but no database can store them."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ParseError("JSON parse error - a string is not valid Unicode") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class JSONParser(DRFJSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply") from None
        _refuse_unencodable(data)
        return data


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
    """drf-spectacular preprocessing hook: document the API, not its index or schema views."""
    return [
        (path, regex, method, view)
        for path, regex, method, view in endpoints
        if path != "/api/" and not path.startswith(("/api/schema/", "/api/docs/"))
    ]
