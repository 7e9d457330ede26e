"""Changelists that cost what their page shows, however many rows the table holds.

Django's changelist counts the whole table twice per page (the filtered and the full
count), and its filters on a relation or a plain column list every related row or every
distinct value (``SELECT DISTINCT`` over the table). At a million instances those are
the page's cost. Here:

- ``FlatChangelistMixin``: no full count (``show_full_result_count = False``), no facet
  counts, and ``BoundedCountPaginator``: the filtered count is exact up to
  ``COUNT_CAP`` rows (a count that stops reading there); beyond it the page says
  "1,000+". Unfiltered on PostgreSQL, the count is the planner's estimate of the
  table's rows (``pg_class.reltuples``, kept by autovacuum's ANALYZE), shown as
  "about N", when that estimate is past the cap. Either way the pages offered are
  those of the first ``COUNT_CAP`` rows (an ``OFFSET`` reads every row it skips):
  filter or search to reach the others.
- ``related_filter``: a relation filtered by a text box (the related row's name or id),
  never a list of every owner or template in the sidebar.
- ``value_filter``: a column filtered by a text box (exact value), never a ``DISTINCT``.
- ``id_filter``: a column that holds an id (no foreign key: the row may be gone),
  filtered by a text box or a link (``?<field>=<id>``).
- ``choices_filter``: a column filtered by the values the code knows (a table of kinds),
  never by the values the table holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.utils.functional import cached_property

from core.ids import db_id

COUNT_CAP = 1_000  # rows: ten pages of the admin's 100


class Count(int):
    """A row count as a changelist shows it: ``10,000+`` when it stopped at the cap,
    ``about 1,000,000`` when it is the planner's estimate."""

    def __new__(cls, value: int, *, words: str = "{:,}"):
        count = super().__new__(cls, value)
        count.words = words
        return count

    def __str__(self) -> str:
        return self.words.format(int(self))


def estimated_rows(queryset: QuerySet) -> int | None:
    """The planner's estimate of the rows of ``queryset``'s table, or None when unknown
    (not PostgreSQL, or never analysed)."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
            [queryset.model._meta.db_table],
        )
        row = cursor.fetchone()
    return None if row is None or row[0] < 0 else int(row[0])


class BoundedCountPaginator(Paginator):
    """A paginator whose count never reads more than ``COUNT_CAP`` rows (see above)."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not rows.query.where:  # the whole table
            estimate = estimated_rows(rows)
            if estimate is not None and estimate > COUNT_CAP:
                return Count(estimate, words="about {:,}")
        counted = rows.order_by()[: COUNT_CAP + 1].count()
        if counted > COUNT_CAP:
            return Count(COUNT_CAP, words="{:,}+")
        return counted

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, max(1, -(-COUNT_CAP // self.per_page)))


class FlatChangelistMixin:
    """For the changelists of tables that grow without bound (instances, history, the
    outbox, DAG runs): their pages stay flat (see above). Put it before ``ModelAdmin``."""

    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = BoundedCountPaginator


def _checked(value: str) -> str:
    """``value`` if the database can compare it; else the admin's "invalid filter" page
    (``?e=1``), not a 500 (PostgreSQL refuses NUL; a lone surrogate cannot be sent)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise IncorrectLookupParameters("not valid Unicode") from None
    if "\x00" in value:
        raise IncorrectLookupParameters("a NUL character")
    return value


class _TextFilter(admin.ListFilter):
    """A text box in the sidebar; ``?<parameter>=<text>``. Subclasses say what it means."""

    template = "admin/gobrave_text_filter.html"
    parameter_name = ""
    placeholder = ""

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        if self.parameter_name in params:
            value = params.pop(self.parameter_name)
            value = value[-1] if isinstance(value, list) else value
            if value.strip():
                self.used_parameters[self.parameter_name] = _checked(value.strip()[:150])

    def value(self) -> str | None:
        return self.used_parameters.get(self.parameter_name)

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str]:
        return [self.parameter_name]

    def choices(self, changelist):
        kept = [
            (name, value)
            for name, value in changelist.params.items()
            if name != self.parameter_name
            for value in (value if isinstance(value, list) else [value])
        ]
        yield {
            "parameter": self.parameter_name,
            "value": self.value() or "",
            "placeholder": self.placeholder,
            "kept": kept,
            "clear": changelist.get_query_string(remove=[self.parameter_name]),
        }


def related_filter(field: str, *, name_field: str, title: str) -> type[admin.ListFilter]:
    """Filter by the relation ``field``: the related row named (``name_field``) or
    numbered as typed. The related ids are read first, so the list's own query compares
    its column with constants (and reads its ``(field, created_at)`` index)."""

    class RelatedFilter(_TextFilter):
        parameter_name = field
        placeholder = f"{name_field} or id"

        def queryset(self, request, queryset):
            value = self.value()
            if value is None:
                return queryset
            query = Q(**{name_field: value})
            key = db_id(value)
            if key is not None:
                query |= Q(pk=key)
            related = queryset.model._meta.get_field(field).related_model
            keys = list(related._default_manager.filter(query).values_list("pk", flat=True))
            return queryset.filter(**{f"{field}_id__in": keys})

    RelatedFilter.title = title
    return RelatedFilter


def value_filter(field: str, *, title: str) -> type[admin.ListFilter]:
    """Filter by the exact value of the column ``field``, typed in."""

    class ValueFilter(_TextFilter):
        parameter_name = field
        placeholder = "exact value"

        def queryset(self, request, queryset):
            value = self.value()
            return queryset if value is None else queryset.filter(**{field: value})

    ValueFilter.title = title
    return ValueFilter


def id_filter(field: str, *, title: str) -> type[admin.ListFilter]:
    """Filter by the column ``field``, which holds an id: a number typed in, or a link's
    (``?<field>=<id>``); anything else is the admin's "invalid filter" page (``?e=1``),
    never a 500."""

    class IdFilter(_TextFilter):
        parameter_name = field
        placeholder = "id"

        def queryset(self, request, queryset):
            value = self.value()
            if value is None:
                return queryset
            key = db_id(value)
            if key is None:
                raise IncorrectLookupParameters(f"{field} must be an id (a number)")
            return queryset.filter(**{field: key})

    IdFilter.title = title
    return IdFilter


def choices_filter(
    field: str, choices: Callable[[], Iterable[tuple[str, str]]], *, title: str
) -> type[admin.SimpleListFilter]:
    """Filter by the column ``field`` among ``choices()`` (value, words): the values the
    code writes, not ``SELECT DISTINCT`` over the table. A value outside them still
    filters when typed in the address (``?<field>=...``)."""

    class ChoicesFilter(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request, model_admin):
            return list(choices())

        def queryset(self, request, queryset):
            value = self.value()
            return queryset if value is None else queryset.filter(**{field: _checked(value)})

    ChoicesFilter.title = title
    return ChoicesFilter
