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
from django.db import connection


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
