"""Migration operations that keep a big table writable while its schema changes.

``AddIndexConcurrently`` builds an index the way an operator expects on a table of a
million rows: PostgreSQL's ``CREATE INDEX CONCURRENTLY`` (writes go on while it builds;
the migration must say ``atomic = False``), and a plain ``CREATE INDEX`` on any other
database, so that SQLite (``make run``) still migrates. Its state change is ``AddIndex``'s:
models declare the index in ``Meta.indexes`` as usual. ``RemoveIndexConcurrently`` is its
counterpart for an index a model no longer declares.

A concurrent build that fails (a deadlock, a cancelled migrate) leaves an INVALID index
behind: ``docs/operations.md`` says how to find and drop it before migrating again.
"""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently as PostgresAddIndexConcurrently
from django.contrib.postgres.operations import (
    RemoveIndexConcurrently as PostgresRemoveIndexConcurrently,
)
from django.db.migrations import AddIndex, RemoveIndex


class AddIndexConcurrently(PostgresAddIndexConcurrently):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class RemoveIndexConcurrently(PostgresRemoveIndexConcurrently):
    """``DROP INDEX CONCURRENTLY`` on PostgreSQL (no lock that stops writes while it
    waits for the index's readers), a plain ``DROP INDEX`` elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
