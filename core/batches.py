"""Work on big, hot tables in short steps: updates and deletes in batches, each its own
statement (and, outside a transaction, its own commit), so none holds its rows' locks,
or vacuum's horizon, for long. Used by backfilling migrations and by retention
(``core.retention``). Both must run outside a transaction to have that effect.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Max, Min, QuerySet


def update_in_batches(queryset: QuerySet, *, batch: int, **values: Any) -> int:
    """``queryset.update(**values)`` one primary-key range of ``batch`` rows at a time.

    1. Read the table's lowest and highest primary key (its index's ends).
    2. Update the rows of ``queryset`` in each range ``[low, low + batch)`` up to the
       highest, one statement each.
    3. Read the highest key again; rows inserted meanwhile are done the same way, until
       none is left.
    Returns how many rows changed. For integer primary keys.
    """
    model = queryset.model
    ends = model._default_manager.aggregate(low=Min("pk"), high=Max("pk"))
    if ends["low"] is None:
        return 0
    low, high, changed = ends["low"], ends["high"], 0
    while low <= high:
        while low <= high:
            changed += queryset.filter(pk__gte=low, pk__lt=low + batch).update(**values)
            low += batch
        high = model._default_manager.aggregate(high=Max("pk"))["high"]
    return changed


def delete_in_batches(queryset: QuerySet, *, batch: int) -> int:
    """Delete the rows of ``queryset``, ``batch`` at a time in primary-key order.

    Each step reads the next ``batch`` keys past the last one it saw (so rows it keeps
    are never read twice) and deletes them in one statement. Returns how many went. For
    models no other row points to (a fast delete: no signals, no cascade).
    """
    model, deleted, last = queryset.model, 0, None
    while True:
        rows = queryset if last is None else queryset.filter(pk__gt=last)
        keys = list(rows.order_by("pk").values_list("pk", flat=True)[:batch])
        if not keys:
            return deleted
        last = keys[-1]
        gone, _ = model._default_manager.filter(pk__in=keys).delete()
        deleted += gone
