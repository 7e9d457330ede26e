"""A model's save as a prepared statement: ``insert``, ``update``, ``update_and_insert``,
many at once (``insert_many``, ``update_many``), and inserts deferred to one pipeline
(``pipelined``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import psycopg
from django.db import connection, connections, models
from django.db.models.expressions import DatabaseDefault
from django.db.models.functions import Now

from core.prepared.layer import active, execute

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
