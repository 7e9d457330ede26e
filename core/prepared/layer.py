"""The layer's switch (``enabled``; ``active``: on PostgreSQL unless it is off) and
``execute``: one statement on Django's connection, bound on the server and prepared once
per connection."""

from __future__ import annotations

import psycopg
from django.db import connection

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
