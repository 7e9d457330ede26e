"""The API lists' pagination: keyset cursors, never a count and never an offset.

A page is ``{"next", "previous", "results"}``: ``next`` and ``previous`` are links (or
``null``) that carry an opaque ``cursor``; ``limit`` (1–500, default 50) is the page
size. A page costs what it shows however many rows the table holds: no ``COUNT(*)``,
and a cursor is the sort key of the row it stops at, so the next page is read from the
index where the last one ended (``WHERE (created_at, id) < (…)``), never by skipping
rows (``OFFSET``).

The contract, for any list and any ``ordering`` (`docs/contract.md`):

1. The rows' order is the list's ordering with ties broken on the primary key, so it is
   total: every row has one place.
2. ``next`` reads the rows strictly after the page's last row; ``previous`` the rows
   strictly before its first. A walk along ``next`` from the first page therefore
   returns every row that existed when it began (and whose sort key did not change)
   exactly once, whatever rows are inserted or deleted meanwhile.
3. A cursor is bound to its ordering: used with another ``ordering``, or altered, it is
   refused (HTTP 400, ``details.cursor``), as is ``offset``, which no list takes any more.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q, QuerySet
from rest_framework import serializers
from rest_framework.pagination import BasePagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

MAX_CURSOR_LENGTH = 1000
_INVALID = "Invalid cursor: follow the `next` and `previous` links as they are."


@dataclass(frozen=True)
class Key:
    """One term of a list's ordering: a concrete field of the rows, and its direction."""

    field: Any
    descending: bool

    @property
    def term(self) -> str:
        return f"-{self.field.name}" if self.descending else self.field.name


@dataclass(frozen=True)
class Cursor:
    """A position: the sort key of a row, and which side of it the page lies on."""

    values: tuple
    before: bool = False  # the rows before ``values`` (a ``previous`` link)
    inclusive: bool = False  # ... and the row at ``values`` itself


def ordering_of(queryset: QuerySet) -> list[Key]:
    """The queryset's ordering as fields of its model, with the primary key appended if
    it is not already there (in the last term's direction), so that the order is total."""
    meta = queryset.model._meta
    terms = list(
        queryset.query.order_by or (meta.ordering if queryset.query.default_ordering else ())
    )
    keys: list[Key] = []
    for term in terms:
        if not isinstance(term, str) or "__" in term or term.lstrip("-") == "?":
            raise ImproperlyConfigured(f"cannot page {meta.label} by {term!r}: not a field")
        name = term.lstrip("-")
        field = meta.pk if name == "pk" else meta.get_field(name)
        if field.null:
            raise ImproperlyConfigured(f"cannot page {meta.label} by {name}: it may be null")
        keys.append(Key(field, term.startswith("-")))
    if not any(key.field == meta.pk for key in keys):
        keys.append(Key(meta.pk, keys[-1].descending if keys else False))
    return keys


def _after(keys: list[Key], cursor: Cursor) -> Q:
    """The rows on ``cursor``'s side of its position, as one condition.

    ``(a, b, pk) > (x, y, z)`` expanded: ``a > x OR (a = x AND b > y) OR (a = x AND b = y
    AND pk > z)``, with ``<`` for a descending term (reversed for ``before``), and ANDed
    with ``a >= x`` so that the database reads its index from the position on.
    """

    def op(key: Key, *, last: bool) -> str:
        greater = key.descending == cursor.before
        if last and cursor.inclusive:
            return "gte" if greater else "lte"
        return "gt" if greater else "lt"

    either = Q()
    equal: dict[str, Any] = {}
    for i, (key, value) in enumerate(zip(keys, cursor.values, strict=True)):
        last = i == len(keys) - 1
        either |= Q(**equal, **{f"{key.field.name}__{op(key, last=last)}": value})
        equal[key.field.name] = value
    first = keys[0]
    bound = "gte" if first.descending == cursor.before else "lte"
    return Q(**{f"{first.field.name}__{bound}": cursor.values[0]}) & either


def _encode(keys: list[Key], cursor: Cursor) -> str:
    body = {
        "o": [key.term for key in keys],
        "v": [
            key.field.value_to_string(_Row(key.field, value))
            for key, value in zip(keys, cursor.values, strict=True)
        ],
        "b": int(cursor.before),
        "i": int(cursor.inclusive),
    }
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class _Row:
    """What ``Field.value_to_string`` reads a value from."""

    def __init__(self, field, value) -> None:
        setattr(self, field.attname, value)


def _decode(keys: list[Key], text: str) -> Cursor:
    invalid = serializers.ValidationError({"cursor": [_INVALID]})
    if len(text) > MAX_CURSOR_LENGTH or not text.isascii():
        raise invalid
    try:
        body = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        terms, raw, before, inclusive = body["o"], body["v"], body["b"], body["i"]
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise invalid from None
    if terms != [key.term for key in keys]:
        raise serializers.ValidationError(
            {"cursor": ["This cursor belongs to another ordering: start again without it."]}
        )
    if not (
        isinstance(raw, list) and len(raw) == len(keys) and all(isinstance(v, str) for v in raw)
    ):
        raise invalid
    if before not in (0, 1) or inclusive not in (0, 1):
        raise invalid
    try:
        values = tuple(_value(key.field, text) for key, text in zip(keys, raw, strict=True))
    except (DjangoValidationError, ValueError, TypeError, OverflowError, UnicodeEncodeError):
        raise invalid from None
    return Cursor(values, before=bool(before), inclusive=bool(inclusive))


def _value(field, text: str):
    """A cursor's value as the database may compare it, or an error: a forged cursor
    must be a 400, never a 500 (no NUL, no lone surrogate, nothing out of the column's
    range, datetimes in UTC)."""
    if "\x00" in text:
        raise ValueError("NUL")
    text.encode("utf-8")
    value = field.to_python(text)
    if value is None:
        raise ValueError("null")
    field.run_validators(value)
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.UTC)
    return value


class CursorPagination(BasePagination):
    """``REST_FRAMEWORK["DEFAULT_PAGINATION_CLASS"]``: the contract in the module's text."""

    cursor_query_param = "cursor"
    limit_query_param = "limit"
    default_limit = 50
    max_limit = 500

    def get_limit(self, request) -> int:
        raw = request.query_params.get(self.limit_query_param)
        if raw is None or raw == "":
            return self.default_limit
        if not (raw.isascii() and raw.isdigit()) or int(raw) > self.max_limit:
            raise serializers.ValidationError(
                {self.limit_query_param: [f"Must be a whole number from 0 to {self.max_limit}."]}
            )
        return int(raw) or self.default_limit

    def paginate_queryset(self, queryset: QuerySet, request, view=None) -> list:
        if "offset" in request.query_params:
            raise serializers.ValidationError(
                {"offset": ["Lists are paged by cursor: follow the `next` and `previous` links."]}
            )
        self.request = request
        limit = self.get_limit(request)
        keys = self.keys = ordering_of(queryset)
        text = request.query_params.get(self.cursor_query_param)
        cursor = _decode(keys, text) if text else None
        rows = queryset
        if cursor is not None:
            rows = rows.filter(_after(keys, cursor))
        if cursor is not None and cursor.before:
            reverse = [
                f"{key.field.name}" if key.descending else f"-{key.field.name}" for key in keys
            ]
            rows = rows.order_by(*reverse)
        else:
            rows = rows.order_by(*(key.term for key in keys))
        page = list(rows[: limit + 1])
        more = len(page) > limit
        page = page[:limit]
        backwards = cursor is not None and cursor.before
        if backwards:
            page.reverse()
        self.next_cursor = self.previous_cursor = None
        if page:
            first, last = self._key(page[0]), self._key(page[-1])
            if more or backwards:
                self.next_cursor = Cursor(last)
            if (more and backwards) or (cursor is not None and not backwards):
                self.previous_cursor = Cursor(first, before=True)
        elif backwards:  # the rows before the cursor went away: from it on, then
            self.next_cursor = Cursor(cursor.values, inclusive=True)
        elif cursor is not None:  # the rows after it went away: up to it, then
            self.previous_cursor = Cursor(cursor.values, before=True, inclusive=True)
        return page

    def _key(self, row) -> tuple:
        return tuple(getattr(row, key.field.attname) for key in self.keys)

    def _link(self, cursor: Cursor | None) -> str | None:
        if cursor is None:
            return None
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_query_param, _encode(self.keys, cursor))

    def get_next_link(self) -> str | None:
        return self._link(self.next_cursor)

    def get_previous_link(self) -> str | None:
        return self._link(self.previous_cursor)

    def get_paginated_response(self, data) -> Response:
        return Response(
            OrderedDict(
                [
                    ("next", self.get_next_link()),
                    ("previous", self.get_previous_link()),
                    ("results", data),
                ]
            )
        )

    def get_paginated_response_schema(self, schema: dict) -> dict:
        link = {"type": "string", "nullable": True, "format": "uri"}
        return {
            "type": "object",
            "required": ["next", "previous", "results"],
            "properties": {
                "next": {**link, "description": "The next page, or null on the last."},
                "previous": {**link, "description": "The previous page, or null on the first."},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view) -> list[dict]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Where the page starts: the opaque value of a `next` or "
                "`previous` link (keyset pagination, no counts).",
                "schema": {"type": "string", "maxLength": MAX_CURSOR_LENGTH},
            },
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": f"Rows per page (default {self.default_limit}).",
                "schema": {"type": "integer", "minimum": 0, "maximum": self.max_limit},
            },
        ]
