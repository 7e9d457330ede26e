"""Migration operations that keep a big table writable while its schema changes.

``AddIndexConcurrently`` builds an index the way an operator expects on a table of a
million rows: PostgreSQL's ``CREATE INDEX CONCURRENTLY`` (writes go on while it builds;
the migration must say ``atomic = False``), and a plain ``CREATE INDEX`` on any other
database, so that SQLite (``make run``) still migrates. Its state change is ``AddIndex``'s:
models declare the index in ``Meta.indexes`` as usual. ``RemoveIndexConcurrently`` is its
counterpart for an index a model no longer declares.

A concurrent build that fails (a deadlock, a cancelled migrate) leaves an INVALID index
behind: ``docs/operations.md`` says how to find and drop it before migrating again.

``add_txid`` adds the events feed's ``txid`` column (``core.write_order``) to an existing
history table without rewriting it (containers 0026 and dags 0007 both call it).
"""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently as PostgresAddIndexConcurrently
from django.contrib.postgres.operations import (
    RemoveIndexConcurrently as PostgresRemoveIndexConcurrently,
)
from django.db import migrations
from django.db.migrations import AddIndex, RemoveIndex

from core import write_order


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


def add_txid(app_label: str, model_name: str) -> migrations.SeparateDatabaseAndState:
    """Add ``txid`` to the model's existing table: in the database by
    ``write_order.add_txid_sql`` (old rows 0, catalog changes only on PostgreSQL; undone
    by dropping the column), in the migration state as the model declares it
    (``write_order.txid_field``)."""

    def table(apps) -> str:
        return apps.get_model(app_label, model_name)._meta.db_table

    def forwards(apps, schema_editor):
        for sql in write_order.add_txid_sql(schema_editor.connection.vendor, table(apps)):
            schema_editor.execute(sql)

    def backwards(apps, schema_editor):
        schema_editor.execute(f'ALTER TABLE "{table(apps)}" DROP COLUMN "txid"')

    return migrations.SeparateDatabaseAndState(
        database_operations=[migrations.RunPython(forwards, backwards)],
        state_operations=[
            migrations.AddField(
                model_name=model_name.lower(), name="txid", field=write_order.txid_field()
            )
        ],
    )


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
