"""The API lists' one filtering and ordering convention (django-filter, the DRF way).

Every list takes the same parameter names wherever its rows have the field:
``status`` (repeatable), ``owner``, ``template`` and ``runtime`` (each an id or a name),
``created_after`` and ``created_before`` (ISO 8601 date-times; after is inclusive,
before exclusive) and ``ordering`` (a field, ``-`` for descending). A value that is not
one of the allowed ones is a 400 naming the parameter, never an empty page or a 500;
ties in an ordering break on the primary key so that pages never overlap. Each app's
``api/filters.py`` declares its lists' filter sets on ``ListFilterSet``; the views set
``filter_backends = [DjangoFilterBackend]`` and run their selector's rows through
``filter_queryset`` (drf-spectacular documents the parameters from the filter sets).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django_filters.fields import IsoDateTimeField

from core.ids import db_id


class NameOrIdFilter(django_filters.CharFilter):
    """Rows whose related row is named ``value`` or has ``value`` as its id.

    ``field_name`` is the relation (``owner``); ``name_field`` the related row's name
    column (``username``). The related rows' ids are read first (one small query), so
    that the list's query compares its own column with constants: the planner then
    reads the (relation, created_at) index instead of guessing how many rows a join
    with a name keeps (docs/benchmarks.md, "Reads at 100,000 rows").
    """

    def __init__(self, *, name_field: str = "name", **kwargs):
        kwargs.setdefault("max_length", 150)
        super().__init__(**kwargs)
        self.name_field = name_field

    def filter(self, qs: QuerySet, value: str) -> QuerySet:
        if value in (None, ""):
            return qs
        query = Q(**{self.name_field: value})
        key = db_id(value)
        if key is not None:
            query |= Q(pk=key)
        related = qs.model._meta.get_field(self.field_name).related_model
        keys = list(related._default_manager.filter(query).values_list("pk", flat=True))
        return qs.filter(**{f"{self.field_name}_id__in": keys})


class Ordering(django_filters.OrderingFilter):
    """``ordering=<field>`` or ``-<field>``, ties broken on the primary key (same direction)."""

    def filter(self, qs: QuerySet, value: Iterable[str] | None) -> QuerySet:
        if not value:
            return qs
        fields = [self.get_ordering_value(param) for param in value]
        tie = "-pk" if fields[-1].startswith("-") else "pk"
        return qs.order_by(*fields, tie)


def ordering(*fields: str, default: str) -> Ordering:
    """The ``ordering`` parameter over ``fields`` (the rows' default order: ``default``)."""
    return Ordering(
        fields=fields,
        help_text=f"Sort field, '-' for descending (default: {default}).",
    )


def statuses(choices) -> django_filters.MultipleChoiceFilter:
    """``status`` (repeatable): rows in any of the given states. Without ``DISTINCT``
    (django-filter's default for a multiple choice): the rows' own column joins nothing
    that could repeat a row, and a ``DISTINCT`` makes the database read every match
    before it can return the first page."""
    return django_filters.MultipleChoiceFilter(
        choices=choices, distinct=False, help_text="One or more statuses (repeat the parameter)."
    )


class UTCDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, turned into UTC here: PostgreSQL refuses offsets past
    ±15:59 that Python accepts (a 500 otherwise); one that leaves the calendar is a 400."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(dt.UTC)
        except OverflowError:
            raise forms.ValidationError("Out of range.", code="invalid") from None


class CreatedFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class ListFilterSet(django_filters.FilterSet):
    """``created_after`` and ``created_before``: every row the API lists has a creation time."""

    created_after = CreatedFilter(
        field_name="created_at", lookup_expr="gte", help_text="Created at or after (ISO 8601)."
    )
    created_before = CreatedFilter(
        field_name="created_at", lookup_expr="lt", help_text="Created before (ISO 8601)."
    )
