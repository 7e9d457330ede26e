"""The plan PostgreSQL makes for a statement, with sequential scans and sorts priced
out: on the tests' tiny tables the planner's estimates would otherwise favour them, and
the plan then shows whether an index serves the statement's filter in its order."""

from __future__ import annotations

from typing import Any

from django.db import connection


def plan_of(sql: str, params: Any = ()) -> str:
    """``EXPLAIN`` of ``sql`` with ``enable_seqscan`` and ``enable_sort`` off (given back
    after), as text."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("SET enable_sort = off")
        try:
            cursor.execute(f"EXPLAIN {sql}", params)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
            cursor.execute("RESET enable_sort")
