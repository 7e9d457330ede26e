"""The events feed: every history entry of instances, DAG runs and engines, as one sequence.

Three tables hold gobrave's history: ``containers.ContainerEvent`` (every request,
transition and engine event of an instance, policy actions and engine decommissions
among them; orphans and leftovers removed), ``dags.DagEvent`` (runs and their nodes)
and ``containers.RuntimeEvent`` (engines: health changes, cordons, decommissions,
enabled and capacity changes). The feed reads them as one sequence ordered by
``(txid, source, id)``, where ``txid`` is the writing transaction
(``core.write_order``) and ``source`` the table's rank in ``SOURCES``.

**The guarantee.** A page holds only entries whose transaction ended before the page
was read (below the *horizon*, read once per page). Entries below a horizon are final,
and every entry written later sorts above it. So a reader that starts anywhere and
follows the position it is given (``Page.position``, the API's ``next`` and
``cursor``) receives every entry exactly once, in the same order, also entries whose
transaction committed after a later one's (ids are taken at insert, not at commit), and
whatever is inserted while it reads. Entries a retention purge deletes before the
reader reaches them are not served.

**Costs.** One statement for the horizon and one per table the filters leave (each
reads its index in order from the position: ``(txid, id)`` and one index per filter,
``containers`` 0028 and 0030, ``dags`` 0009), with the owner joined; no count. Reads
the database only.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from containers.access import sees_all_instances
from containers.models import ContainerEvent, RuntimeEvent
from core.write_order import horizon
from dags.models import DagEvent

INSTANCE, DAG_RUN, ENGINE = "instance", "dag_run", "engine"
# A transaction's entries: instances' first. A new source is added at the end (a cursor
# names a source by its rank).
SOURCES: tuple[str, ...] = (INSTANCE, DAG_RUN, ENGINE)
_MODELS = {INSTANCE: ContainerEvent, DAG_RUN: DagEvent, ENGINE: RuntimeEvent}
_OWNED = frozenset({INSTANCE, DAG_RUN})  # engines' entries concern no owner
VIEW_DAG_RUNS = "dags.view_dagrun"
VIEW_ENGINES = "containers.view_runtime"


@dataclass(frozen=True)
class Position:
    """A place in the feed: after the entry ``(txid, source, id)``; the start is
    ``Position()``."""

    txid: int = -1
    source: int = -1
    id: int = 0


@dataclass(frozen=True)
class Filters:
    """What a reader asks for; every field empty: everything it may see."""

    instance: uuid.UUID | None = None
    dag_run: uuid.UUID | None = None
    owner_ids: list[int] | None = None  # None: any owner; []: nobody's
    kind: str = ""
    actor: str = ""
    created_after: dt.datetime | None = None  # inclusive
    created_before: dt.datetime | None = None  # exclusive
    source: str = ""


@dataclass(frozen=True)
class Entry:
    """One history entry as the feed gives it (``row`` is the table's own row)."""

    source: str
    row: Any
    position: Position


@dataclass(frozen=True)
class Page:
    entries: list[Entry]
    position: Position  # after the last entry (the given one when there is none)
    more: bool  # more entries were ready when the page was read


def feed_scope(user) -> dict[str, int | None]:
    """Whose entries ``user`` may read, per source: None for everyone's (permission
    ``containers.view_containerinstance``, ``dags.view_dagrun``), else their own id:
    also the history of their deleted instances, which keeps its owner. Engines'
    entries only with ``containers.view_runtime`` (those who see the engines); a source
    missing from the answer is not read at all."""
    scope: dict[str, int | None] = {
        INSTANCE: None if sees_all_instances(user) else user.pk,
        DAG_RUN: None if user.has_perm(VIEW_DAG_RUNS) else user.pk,
    }
    if user.has_perm(VIEW_ENGINES):
        scope[ENGINE] = None
    return scope


def _after(position: Position, rank: int) -> Q:
    """The rows of the table ranked ``rank`` that sort after ``position``."""
    if rank > position.source:
        return Q(txid__gte=position.txid)
    if rank < position.source:
        return Q(txid__gt=position.txid)
    return Q(txid__gt=position.txid) | Q(txid=position.txid, id__gt=position.id)


def _rows(source: str, filters: Filters, owner: int | None) -> QuerySet | None:
    """The table's rows the filters and the reader's scope leave (None: none at all)."""
    if filters.source and filters.source != source:
        return None
    if (filters.instance and source != INSTANCE) or (filters.dag_run and source != DAG_RUN):
        return None
    if source not in _OWNED:
        if filters.owner_ids is not None:  # entries of no owner
            return None
        return _filtered(RuntimeEvent.objects.all(), filters)
    rows = _MODELS[source].objects.select_related("owner")
    if owner is not None:
        if filters.owner_ids is not None and owner not in filters.owner_ids:
            return None
        rows = rows.filter(owner_id=owner)
    elif filters.owner_ids is not None:
        if not filters.owner_ids:
            return None
        rows = rows.filter(owner_id__in=filters.owner_ids)
    if filters.instance:
        rows = rows.filter(instance_id=filters.instance)
    if filters.dag_run:
        rows = rows.filter(run_id=filters.dag_run)
    return _filtered(rows, filters)


def _filtered(rows: QuerySet, filters: Filters) -> QuerySet:
    """The filters every source has: kind, actor, time range."""
    if filters.kind:
        rows = rows.filter(kind=filters.kind)
    if filters.actor:
        rows = rows.filter(actor=filters.actor)
    if filters.created_after:
        rows = rows.filter(created_at__gte=filters.created_after)
    if filters.created_before:
        rows = rows.filter(created_at__lt=filters.created_before)
    return rows


def events_page(*, user, filters: Filters, after: Position = Position(), limit: int = 50) -> Page:
    """The next ``limit`` entries after ``after`` that ``user`` may read (``feed_scope``);
    the whole guarantee of the module's text holds for every source.

    1. Read the horizon (one statement).
    2. From each table the filters leave, read up to ``limit + 1`` rows after the
       position and below the horizon, in ``(txid, id)`` order (one statement each).
    3. Merge them by ``(txid, rank, id)`` and keep the first ``limit``.
    """
    scope = feed_scope(user)
    return _page(scope=scope, filters=filters, after=after, limit=limit)


def _page(*, scope: dict[str, int | None], filters: Filters, after: Position, limit: int) -> Page:
    tables = [
        (rank, s, _rows(s, filters, scope[s])) for rank, s in enumerate(SOURCES) if s in scope
    ]
    tables = [(rank, s, rows) for rank, s, rows in tables if rows is not None]
    if not tables:
        return Page([], after, False)
    top = horizon()
    found: list[Entry] = []
    for rank, source, rows in tables:
        rows = rows.filter(_after(after, rank))
        if top is not None:
            rows = rows.filter(txid__lt=top)
        for row in rows.order_by("txid", "id")[: limit + 1]:
            found.append(Entry(source, row, Position(row.txid, rank, row.id)))
    found.sort(key=lambda entry: (entry.position.txid, entry.position.source, entry.position.id))
    entries = found[:limit]
    return Page(entries, entries[-1].position if entries else after, len(found) > limit)


def events_all(*, filters: Filters, after: Position = Position(), batch: int = 1000):
    """Every entry after ``after`` that the filters leave, whoever owns it, page by page
    (each page a few short statements; nothing held open between them): for the export.
    Stops at the horizon of its last page."""
    scope: dict[str, int | None] = {source: None for source in SOURCES}
    while True:
        page = _page(scope=scope, filters=filters, after=after, limit=batch)
        yield from page.entries
        if not page.more:
            return
        after = page.position
