"""The hot path's statements, each compiled once and run as a PostgreSQL prepared
statement on Django's connection.

Building a queryset's SQL costs more than running it on every request (``first``,
``objects``, ``rows``, ``count``, ``exists``, ``update_rows``: a queryset compiled once
per shape with stand-ins for its values, and read back as the ORM reads it; ``insert``,
``update``, ``update_and_insert``: a model's save), and Django's PostgreSQL cursors bind
on the client, so the server parses and plans each statement anew. ``execute`` runs one
statement (compiled here, or SQL the ORM cannot write: the claim's) on Django's
connection, in its current transaction, with a psycopg cursor that binds on the server,
prepared once per connection (psycopg keeps at most ``prepared_max``, and forgets them
all on a rollback) when ``OPTIONS["prepare_threshold"]`` is not ``None`` (gobrave's
settings set it unless ``DATABASE_PREPARED_STATEMENTS=0``, for a pooler that cannot keep
them). Errors are Django's, and Django logs the statement when it logs queries. Off
PostgreSQL (or with ``enabled`` off) every function runs its queryset through the ORM.

Why not psycopg's and Django's own: measured on 2026-12-04 (13:36 UTC, 2 cores shared,
load 1.5-3.5) with ``.venv/bin/python bench/prepared_statements.py --rounds 12 --creates
60 --claims 80 --backlog 5000``, p50 per call over 12 interleaved rounds: a create
(``container_create_by_template``) 3.60 ms here, against 4.46 ms with the layer off,
Django's ``server_side_binding`` and psycopg's ``prepare_threshold`` 5 (this layer 19%
faster), 4.56 ms with threshold 0 (21%) and 5.35 ms with Django's defaults (33%); a claim
of 8 rows out of 5,000 (``relay.claim``) 3.33 ms, against 3.70 (10%), 3.47 (4%) and 4.64
ms (28%). The claim's ORM steps (SQLite's path) take 60.9 ms there.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator
from typing import NamedTuple

import psycopg
from django.db import connection, connections, models
from django.db.models.expressions import DatabaseDefault
from django.db.models.functions import Now
from django.db.models.query import get_related_populators
from django.db.models.sql import Query, UpdateQuery
from django.db.models.sql.compiler import SQLCompiler
from django.db.transaction import TransactionManagementError

# Off: every statement goes through the ORM (or, for literal SQL, Django's own cursor),
# as on SQLite. ``bench/prepared_statements.py`` turns it off to measure the layer.
enabled = True


def active() -> bool:
    """Whether the statements of this module run as prepared statements: on PostgreSQL,
    unless ``enabled`` is off. Every caller that has an ORM form asks this."""
    return enabled and connection.vendor == "postgresql"


def execute(sql: str, params: dict | list | None = None) -> psycopg.Cursor:
    """Run one statement (``%(name)s`` placeholders with a dict, ``%s`` with a list); the
    cursor holds its result. With the layer off (``active``), Django's own cursor."""
    if not enabled:
        cursor = connection.cursor()
        cursor.execute(sql, params)
        return cursor
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = connection.connection
    cursor = psycopg.Cursor(raw)
    prepare = raw.prepare_threshold is not None or None
    with connection.wrap_database_errors:
        if connection.queries_logged:  # DEBUG, or a test capturing queries: logged as any
            with connection.make_debug_cursor(cursor).debug_sql(sql, params):
                cursor.execute(sql, params, prepare=prepare)
        else:
            cursor.execute(sql, params, prepare=prepare)
    return cursor


_inserts: dict[tuple, str] = {}


def insert(obj: models.Model) -> None:
    """``obj.save(force_insert=True)`` as a prepared statement (on PostgreSQL; the ORM
    elsewhere), for rows written on every request: the ORM would build the same INSERT
    each time.

    Every field's ``pre_save`` runs as in the ORM (defaults, ``auto_now_add``); a value
    that is ``Now()`` is the statement's timestamp, as the ORM writes it; a field left to
    its ``db_default`` is not written (the column's default applies) and is read back,
    as is an auto-incremented primary key left unset. Sends no ``pre_save`` or
    ``post_save`` signal: only for models that have no receivers.
    """
    if not active():
        obj.save(force_insert=True)
        return
    sql, values = _insert_statement(obj)
    _read_back(obj, execute(sql, values))


def _insert_statement(obj: models.Model) -> tuple[str, dict]:
    """``insert``'s statement (``RETURNING`` the primary key) and its parameters."""
    meta = obj._meta
    fields = [
        field
        for field in meta.concrete_fields
        if not (field.primary_key and field.db_returning and getattr(obj, field.attname) is None)
    ]
    values, now, left = {}, [], set()
    db = connections[connection.alias]  # the connection itself: no proxy lookup per field
    for field in fields:
        value = field.pre_save(obj, add=True)
        if isinstance(value, DatabaseDefault):
            left.add(field.attname)
        elif isinstance(value, Now):
            now.append(field.attname)
        else:
            values[field.attname] = field.get_db_prep_save(value, db)
    returned = [meta.pk.column, *(f.column for f in fields if f.attname in left)]
    fields = [field for field in fields if field.attname not in left]
    key = (meta.label, tuple(f.attname for f in fields), tuple(now), tuple(returned))
    if key not in _inserts:
        placeholders = [
            "STATEMENT_TIMESTAMP()" if f.attname in now else f"%({f.attname})s" for f in fields
        ]
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        _inserts[key] = (
            f"INSERT INTO {meta.db_table} ({columns}) VALUES ({', '.join(placeholders)})"
            f" RETURNING {', '.join(connection.ops.quote_name(c) for c in returned)}"
        )
    return _inserts[key], values


_local = threading.local()  # ``pipelined``'s inserts read back at its end, per thread


@contextlib.contextmanager
def pipelined(*, defer: tuple[type[models.Model], ...]) -> Iterator[None]:
    """Send this module's statements without waiting for each answer (psycopg's
    pipeline mode): a run of writes costs about one round trip, not one each. What an
    INSERT of a ``defer`` model returns (its primary key) is set on its object only when
    the block ends: for rows nothing reads back meanwhile (the monitor's history entries
    of a batch); any other statement's answer is waited for when it is read, as usual.
    Inside a transaction; an error of any statement is raised by the block's end at the
    latest, and the transaction is then to be rolled back. The ORM's own statements
    meanwhile are each waited for (a sync after each: the ORM reads an UPDATE's row
    count at once, which a pipeline would leave unknown). Without the layer
    (``active``), nothing changes."""
    if not active() or getattr(_local, "pending", None) is not None:
        yield
        return
    connection.ensure_connection()
    pending: list[tuple[models.Model, psycopg.Cursor]] = []
    _local.pending, _local.defer = pending, defer
    try:
        with connection.wrap_database_errors, connection.connection.pipeline() as pipe:

            def synced(execute, sql, params, many, context):
                result = execute(sql, params, many, context)
                pipe.sync()
                return result

            with connection.execute_wrapper(synced):
                yield
    finally:
        _local.pending = _local.defer = None
    for obj, cursor in pending:
        _inserted(obj, cursor)


def _read_back(obj: models.Model, cursor: psycopg.Cursor) -> None:
    """``_inserted`` now, or at the end of ``pipelined`` for a deferred model."""
    pending = getattr(_local, "pending", None)
    if pending is not None and isinstance(obj, _local.defer):
        pending.append((obj, cursor))
    else:
        _inserted(obj, cursor)


def _inserted(obj: models.Model, cursor: psycopg.Cursor) -> None:
    """Set what an executed ``_insert_statement`` returned on ``obj``, now saved: its
    primary key, then the fields left to their ``db_default`` (in the same order)."""
    pk, *defaults = cursor.fetchone()
    setattr(obj, obj._meta.pk.attname, pk)
    left = [
        field
        for field in obj._meta.concrete_fields
        if isinstance(getattr(obj, field.attname), DatabaseDefault)
    ]
    for field, value in zip(left, defaults, strict=True):
        setattr(obj, field.attname, value)
    obj._state.adding, obj._state.db = False, connection.alias


_updates: dict[tuple, str] = {}


def update(obj: models.Model, fields: tuple[str, ...]) -> int:
    """``obj.save(update_fields=fields)`` as a prepared statement (on PostgreSQL; the ORM
    elsewhere), for rows saved on every request or event. Each field's ``pre_save`` runs
    as in the ORM (``auto_now``). Returns the rows updated (0: the row is gone). Sends no
    ``pre_save`` or ``post_save`` signal: only for models that have no receivers.
    """
    if not active():
        obj.save(update_fields=list(fields))
        return 1
    return execute(*_update_statement(obj, fields)).rowcount


def _update_statement(obj: models.Model, fields: tuple[str, ...]) -> tuple[str, dict]:
    """``update``'s statement and its parameters (``v0``, ``v1``... and ``pk``)."""
    meta = obj._meta
    chosen = [meta.get_field(name) for name in fields]
    db = connections[connection.alias]  # the connection itself: no proxy lookup per field
    values = {
        f"v{i}": field.get_db_prep_save(field.pre_save(obj, add=False), db)
        for i, field in enumerate(chosen)
    }
    key = (meta.label, fields)
    if key not in _updates:
        sets = ", ".join(
            f"{connection.ops.quote_name(field.column)} = %(v{i})s"
            for i, field in enumerate(chosen)
        )
        column = connection.ops.quote_name(meta.pk.column)
        _updates[key] = f"UPDATE {meta.db_table} SET {sets} WHERE {column} = %(pk)s"
    return _updates[key], {**values, "pk": obj.pk}


def _execute_many(sql: str, params: list[dict], *, returning: bool = False) -> psycopg.Cursor:
    """Run one statement once per set of ``params``, sent all at once (psycopg's
    ``executemany`` pipelines it: one round trip, not one per set), on Django's
    connection in its current transaction; logged as Django logs an ``executemany``."""
    connection.ensure_connection()
    connection.validate_thread_sharing()
    cursor = psycopg.Cursor(connection.connection)
    with connection.wrap_database_errors:
        if connection.queries_logged:
            with connection.make_debug_cursor(cursor).debug_sql(sql, params, many=True):
                cursor.executemany(sql, params, returning=returning)
        else:
            cursor.executemany(sql, params, returning=returning)
    return cursor


def insert_many(objs: list[models.Model]) -> None:
    """``insert`` of each of ``objs`` (rows of one model, in this order): on PostgreSQL
    the same prepared statement for each, sent for them all at once (``_execute_many``);
    the ORM's saves elsewhere. Each object gets its primary key (and the fields left to
    their ``db_default``) as ``insert`` gives them."""
    if not objs:
        return
    statements = [_insert_statement(obj) for obj in objs] if active() else []
    if len({sql for sql, _ in statements}) != 1:  # off, or not one shape: one at a time
        for obj in objs:
            insert(obj)
        return
    cursor = _execute_many(statements[0][0], [values for _, values in statements], returning=True)
    for obj in objs:
        _inserted(obj, cursor)
        cursor.nextset()


def update_many(objs: list[models.Model], fields: tuple[str, ...]) -> None:
    """``update(obj, fields)`` of each of ``objs`` (rows of one model): on PostgreSQL one
    prepared statement, sent for them all at once (``_execute_many``); the ORM's saves
    elsewhere. The caller holds the rows."""
    if not objs:
        return
    if not active():
        for obj in objs:
            obj.save(update_fields=list(fields))
        return
    statements = [_update_statement(obj, fields) for obj in objs]
    _execute_many(statements[0][0], [values for _, values in statements])


def update_and_insert(obj: models.Model, fields: tuple[str, ...], new: models.Model) -> None:
    """``update(obj, fields)`` and then ``insert(new)``: on PostgreSQL one prepared
    statement (the UPDATE in a CTE; one round trip for a state change and its history
    entry), the ORM's two saves elsewhere. The caller holds ``obj``'s row lock."""
    if not active():
        update(obj, fields)
        insert(new)
        return
    changed, changes = _update_statement(obj, fields)
    added, values = _insert_statement(new)
    if set(changes) & set(values):
        raise ValueError(f"update_and_insert: parameter names clash ({set(changes) & set(values)})")
    _read_back(new, execute(f"WITH updated AS ({changed}) {added}", {**changes, **values}))


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
