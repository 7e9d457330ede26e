"""The API's defaults (``REST_FRAMEWORK`` settings): paginator, JSON parser, token auth.

Each exists so that no input turns into a 500: DRF's ``LimitOffsetPagination`` passes
any ``offset`` through (PostgreSQL refuses an OFFSET beyond bigint), its ``JSONParser``
lets a too deeply nested document escape as ``RecursionError``, and its token
and session authentication send any key or cookie, NUL bytes included, to the database.
Here they are 400s and 401s.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from drf_spectacular import authentication as spectacular_auth
from rest_framework import authentication, exceptions, serializers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser as DRFJSONParser

from tenants.selectors import token_with_user


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


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication, refusing a malformed key before it reaches the database.

    Keys are 40 hex characters; anything else (a NUL byte among them, which PostgreSQL
    cannot even compare) is an invalid token, answered 401 like any unknown key.
    """

    def authenticate_credentials(self, key):
        if not (0 < len(key) <= 40 and key.isascii() and key.isalnum()):
            raise exceptions.AuthenticationFailed("Invalid token.")
        if connection.vendor != "postgresql":
            return super().authenticate_credentials(key)
        found = token_with_user(key)  # every API request: one prepared statement
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        token, user = found
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return user, token


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session authentication, ignoring a session cookie that cannot be a session key.

    Django looks any cookie value up in the database, and PostgreSQL refuses NUL bytes
    with an error (a 500); such a cookie authenticates nobody instead.
    """

    def authenticate(self, request):
        key = request._request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        if key is not None and not (key.isascii() and key.isalnum()):
            return None
        return super().authenticate(request)


class SessionScheme(spectacular_auth.SessionScheme):
    """Documents ``SessionAuthentication`` above as the cookie scheme (drf-spectacular)."""

    target_class = SessionAuthentication
