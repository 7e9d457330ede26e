"""Querysets compiled once per shape with stand-ins for their values and read back as the
ORM reads them (``first``, ``objects``, ``rows``, ``count``, ``exists``), and their
updates (``update_rows``, ``update_returning``)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Hashable
from typing import NamedTuple

from django.db import connection, models
from django.db.models.query import get_related_populators
from django.db.models.sql import Query, UpdateQuery
from django.db.models.sql.compiler import SQLCompiler
from django.db.transaction import TransactionManagementError

from core.prepared.layer import active, execute


class _Compiled(NamedTuple):
    """One queryset's statement, compiled once: its SQL, its parameters as compiled, which
    of them are each call's values (position → name), and what reads its rows back."""

    compiler: SQLCompiler
    sql: str
    params: list
    places: dict[int, str]
    converters: dict


_compiled: dict[object, _Compiled] = {}


def _sentinel(name: str, value: object, index: int) -> object:
    """A stand-in for ``value`` while a queryset is compiled: of its type, never a real
    value (a string no client can send, an id no row can have but within an ``integer``
    column's range, which Django checks a lookup against, a uuid of version 0, which
    ``uuid4`` never makes, a negative duration of a few microseconds)."""
    if isinstance(value, uuid.UUID):
        return uuid.UUID(int=index + 1)
    if isinstance(value, dt.timedelta):
        return dt.timedelta(microseconds=-(index + 1))
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(
            f"{name}: only str, int, uuid and timedelta values can be compiled, not {value!r}"
        )
    return f"\x00{name}\x00" if isinstance(value, str) else -(2**31) + 1 + index


def _statement(
    shape: object, query: Callable[[dict], Query], values: dict
) -> tuple[_Compiled, list]:
    """The statement of ``query(values)`` and this call's parameters, compiled once per
    ``shape`` with stand-ins (``_sentinel``) that each call's ``values`` replace."""
    if shape not in _compiled:
        stand_ins = {name: _sentinel(name, v, i) for i, (name, v) in enumerate(values.items())}
        compiler = query(stand_ins).get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        by_value = {v: name for name, v in stand_ins.items()}
        places = {
            i: by_value[p]
            for i, p in enumerate(params)
            if isinstance(p, Hashable) and p in by_value
        }
        if set(places.values()) != set(values):
            raise ValueError(f"{shape}: not every value reached the SQL ({sorted(values)})")
        select = getattr(compiler, "select", None) or []
        converters = compiler.get_converters([column[0] for column in select]) if select else {}
        _compiled[shape] = _Compiled(compiler, sql, list(params), places, converters)
    done = _compiled[shape]
    return done, [
        values[done.places[i]] if i in done.places else p for i, p in enumerate(done.params)
    ]


def _read(shape: object, build: Callable[..., models.QuerySet], values: dict, wrap=None):
    """The rows of ``wrap(build(**values))``, compiled once, each value converted as the
    ORM converts it; and the compiled statement."""
    wrap = wrap or (lambda rows: rows)
    done, params = _statement(shape, lambda stand_ins: wrap(build(**stand_ins)).query, values)
    if done.compiler.query.select_for_update and connection.get_autocommit():
        # As the ORM refuses it on every call (only the first call here compiles).
        raise TransactionManagementError(
            "select_for_update cannot be used outside of a transaction."
        )
    found = execute(done.sql, params).fetchall()
    if done.converters:
        found = [tuple(row) for row in done.compiler.apply_converters(found, done.converters)]
    return found, done


def _objects(done: _Compiled, found: list) -> list[models.Model]:
    """Model objects from the rows of a compiled queryset, as Django's ``ModelIterable``
    builds them (``select_related`` objects and annotations included)."""
    compiler = done.compiler
    info, select = compiler.klass_info, compiler.select
    start, end = info["select_fields"][0], info["select_fields"][-1] + 1
    names = [column[0].target.attname for column in select[start:end]]
    populators = get_related_populators(info, select, connection.alias)
    made = []
    for row in found:
        obj = info["model"].from_db(connection.alias, names, row[start:end])
        for populator in populators:
            populator.populate(row, obj)
        for name, place in compiler.annotation_col_map.items():
            setattr(obj, name, row[place])
        made.append(obj)
    return made


def first(shape: object, build: Callable[..., models.QuerySet], **values: object):
    """``build(**values).first()`` (without its ordering by pk), with the queryset
    compiled once per ``shape``.

    For reads that every request makes through a queryset that is costly to build (a
    template open to its user, an instance locked with its runtime): ``build`` is called
    once with stand-ins for ``values`` (``_sentinel``), its SQL kept (locking clauses,
    ``select_related`` joins and all), and each call runs it as a prepared statement with
    the values put back and reads the row back as the ORM does. ``shape`` names
    everything else that changes the SQL (which ``values`` are there, the branch
    ``build`` takes). Elsewhere than on PostgreSQL, ``build(**values).first()``.
    """
    if not active():
        return build(**values).first()
    found, done = _read(shape, build, values, lambda rows: rows[:1])
    return _objects(done, found)[0] if found else None


def objects(shape: object, build: Callable[..., models.QuerySet], **values: object) -> list:
    """``list(build(**values))``, compiled once per ``shape`` as ``first`` is."""
    if not active():
        return list(build(**values))
    found, done = _read(shape, build, values)
    return _objects(done, found)


def rows(shape: object, build: Callable[..., models.QuerySet], **values: object) -> list[tuple]:
    """``list(build(**values))`` for a ``values_list()`` queryset (not ``flat``): tuples,
    compiled once per ``shape`` as ``first`` is."""
    if not active():
        return [tuple(row) for row in build(**values)]
    return _read(shape, build, values)[0]


def count(shape: object, build: Callable[..., models.QuerySet], **values: object) -> int:
    """``build(**values).count()``, compiled once per ``shape`` as ``first`` is (one
    statement: a count over the queryset's rows)."""
    if not active():
        return build(**values).count()
    done, params = _statement(
        shape, lambda stand_ins: build(**stand_ins).order_by().values("pk").query, values
    )
    (number,) = execute(f"SELECT count(*) FROM ({done.sql}) AS counted", params).fetchone()
    return number


def exists(shape: object, build: Callable[..., models.QuerySet], **values: object) -> bool:
    """``build(**values).exists()``, compiled once per ``shape`` as ``first`` is."""
    if not active():
        return build(**values).exists()
    done, params = _statement(
        shape, lambda stand_ins: build(**stand_ins).order_by().values("pk")[:1].query, values
    )
    return execute(f"SELECT EXISTS ({done.sql})", params).fetchone()[0]


def _update_query(build: Callable[..., tuple[models.QuerySet, dict]], stand_ins: dict) -> Query:
    """The UPDATE of ``rows.update(**changes)`` for ``build(**stand_ins)``'s pair."""
    rows, changes = build(**stand_ins)
    update = rows.query.chain(UpdateQuery)
    update.add_update_values(changes)
    update.clear_select_clause()
    return update


def update_rows(
    shape: object,
    build: Callable[..., tuple[models.QuerySet, dict[str, object]]],
    *,
    notify: tuple[str, str] | None = None,
    **values: object,
) -> int:
    """``rows.update(**changes)`` where ``build(**values)`` gives ``(rows, changes)``
    (changes: field → value or expression), compiled once per ``shape`` as ``first`` is;
    the number of rows updated.

    ``notify``: ``(channel, payload)`` of a ``NOTIFY`` sent in the same statement on
    PostgreSQL (the UPDATE in a CTE: one round trip; delivered at commit), and through
    ``pg_notify`` after the update when the layer is off; nowhere else.
    """
    if not active():
        rows, changes = build(**values)
        count = rows.update(**changes)
        if notify is not None and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", list(notify))
        return count
    done, params = _statement(shape, lambda stand_ins: _update_query(build, stand_ins), values)
    if notify is None:
        return execute(done.sql, params).rowcount
    sql = (
        f"WITH updated AS ({done.sql} RETURNING 1)"
        " SELECT (SELECT count(*) FROM updated), pg_notify(%s, %s)"
    )
    return execute(sql, [*params, *notify]).fetchone()[0]


def update_returning(
    shape: object,
    build: Callable[..., tuple[models.QuerySet, dict[str, object]]],
    **values: object,
) -> models.Model | None:
    """``update_rows`` for a queryset of at most one row, returning that row as it is after
    the update (None: no row matched): on PostgreSQL one statement (``RETURNING`` every
    column), the ORM's update and then its read elsewhere."""
    if not active():
        rows, changes = build(**values)
        keys = list(rows.values_list("pk", flat=True)[:1])
        if not keys or not rows.filter(pk__in=keys).update(**changes):
            return None
        return rows.model._default_manager.get(pk=keys[0])
    done, params = _statement(shape, lambda stand_ins: _update_query(build, stand_ins), values)
    model = done.compiler.query.model
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    returning = ", ".join(quote(field.column) for field in fields)
    row = execute(f"{done.sql} RETURNING {returning}", params).fetchone()
    if row is None:
        return None
    converted = [
        field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
        for field, value in zip(fields, row, strict=True)
    ]
    return model.from_db(connection.alias, [field.attname for field in fields], converted)
