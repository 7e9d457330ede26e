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

Where what lives:
- ``layer``: the switch (``enabled``, ``active``) and ``execute``. The switch is
  ``core.prepared.layer.enabled``: every function here reads it there, so that is where
  a bench or a test turns the layer off (setting ``core.prepared.enabled`` would change
  nothing; the package does not export it).
- ``saves``: a model's save (``insert``, ``update``, ``update_and_insert``, ``insert_many``,
  ``update_many``) and ``pipelined``.
- ``querysets``: querysets compiled once per shape (``first``, ``objects``, ``rows``,
  ``count``, ``exists``) and their updates (``update_rows``, ``update_returning``).
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up.
"""

from core.prepared.layer import active, execute
from core.prepared.querysets import (
    count,
    exists,
    first,
    objects,
    rows,
    update_returning,
    update_rows,
)
from core.prepared.saves import (
    insert,
    insert_many,
    pipelined,
    update,
    update_and_insert,
    update_many,
)

__all__ = [
    "active",
    "count",
    "execute",
    "exists",
    "first",
    "insert",
    "insert_many",
    "objects",
    "pipelined",
    "rows",
    "update",
    "update_and_insert",
    "update_many",
    "update_returning",
    "update_rows",
]
