"""The relay's hot statements as PostgreSQL prepared statements, on Django's connection.

Django's PostgreSQL cursors bind parameters on the client, so the server parses and
plans every statement anew; for the claim's one large statement that planning cost more
than running it (``docs/benchmarks.md``). ``execute`` runs a statement on Django's
connection, in its current transaction, with a psycopg cursor that binds on the server,
and has psycopg prepare it (once per connection; psycopg keeps at most
``prepared_max`` of them) when the database settings allow prepared statements
(``OPTIONS["prepare_threshold"]`` not ``None``: gobrave's settings set it unless
``DATABASE_PREPARED_STATEMENTS=0``, for a pooler that cannot keep them). Errors are
Django's, as from any cursor, and Django logs the statement when it logs queries. One
statement per call: the server's extended protocol
takes no more.
"""

from __future__ import annotations

import psycopg
from django.db import connection, models
from django.db.models.functions import Now


def execute(sql: str, params: dict | list | None = None) -> psycopg.Cursor:
    """Run one statement (``%(name)s`` placeholders with a dict, ``%s`` with a list); the
    cursor holds its result."""
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


def columns(model: type[models.Model], alias: str) -> str:
    """Every concrete column of ``model`` under table alias ``alias``, in field order (what
    ``from_row`` reads)."""
    return ", ".join(
        f"{alias}.{connection.ops.quote_name(f.column)}" for f in model._meta.concrete_fields
    )


def from_row(model: type[models.Model], values) -> models.Model:
    """A ``model`` object from the values of ``columns(model, ...)``, as the ORM builds it
    (each field's ``from_db_value`` applied)."""
    fields = model._meta.concrete_fields
    converted = [
        field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
        for field, value in zip(fields, values, strict=True)
    ]
    return model.from_db(connection.alias, [field.attname for field in fields], converted)


_inserts: dict[tuple, str] = {}


def insert(obj: models.Model) -> None:
    """``obj.save(force_insert=True)`` as a prepared statement (on PostgreSQL; the ORM
    elsewhere), for rows written on every request: the ORM would build the same INSERT
    each time.

    Every field's ``pre_save`` runs as in the ORM (defaults, ``auto_now_add``); a value
    that is ``Now()`` is the statement's timestamp, as the ORM writes it. An
    auto-incremented primary key left unset is read back. Sends no ``pre_save`` or
    ``post_save`` signal: only for models that have no receivers.
    """
    if connection.vendor != "postgresql":
        obj.save(force_insert=True)
        return
    meta = obj._meta
    fields = [
        field
        for field in meta.concrete_fields
        if not (field.primary_key and field.db_returning and getattr(obj, field.attname) is None)
    ]
    values, now = {}, []
    for field in fields:
        value = field.pre_save(obj, add=True)
        if isinstance(value, Now):
            now.append(field.attname)
        else:
            values[field.attname] = field.get_db_prep_save(value, connection)
    key = (meta.label, tuple(f.attname for f in fields), tuple(now))
    if key not in _inserts:
        placeholders = [
            "STATEMENT_TIMESTAMP()" if f.attname in now else f"%({f.attname})s" for f in fields
        ]
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        _inserts[key] = (
            f"INSERT INTO {meta.db_table} ({columns}) VALUES ({', '.join(placeholders)})"
            f" RETURNING {meta.pk.column}"
        )
    (pk,) = execute(_inserts[key], values).fetchone()
    setattr(obj, meta.pk.attname, pk)
    obj._state.adding, obj._state.db = False, connection.alias
