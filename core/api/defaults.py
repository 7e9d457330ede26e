"""The API's defaults (``REST_FRAMEWORK`` settings): the JSON parser (the paginator is
``core.api.pagination``).

It exists so that no input turns into a 500: DRF's ``JSONParser`` lets a too deeply
nested document escape as ``RecursionError``. Here it is a 400 (the authentication
classes that refuse malformed keys live in ``tenants.authentication``).
"""

from __future__ import annotations

from rest_framework.exceptions import ParseError
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


def exclude_schema_views(endpoints):
    """drf-spectacular preprocessing hook: document the API, not its index or schema views."""
    return [
        (path, regex, method, view)
        for path, regex, method, view in endpoints
        if path != "/api/" and not path.startswith(("/api/schema/", "/api/docs/"))
    ]
