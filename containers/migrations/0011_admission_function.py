"""PostgreSQL: the admission gate's lock and its pending count in one round trip.

``gobrave_admission_pending()`` locks the ``admission`` gate row, then counts ``pending``
instances. A PL/pgSQL function runs each statement on a new snapshot (READ COMMITTED), so
the count, taken after the lock, sees every earlier holder's committed rows: the same
exactness as two statements, with one round trip (and one wait for the client's
interpreter) less while the gate is held. -1 when the gate row is missing (the caller
makes it). Nothing on SQLite (IMMEDIATE transactions serialize there).
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION gobrave_admission_pending() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM containers_gate WHERE name = 'admission' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    RETURN (SELECT count(*) FROM containers_containerinstance WHERE status = 'pending');
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS gobrave_admission_pending()"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("containers", "0010_remove_instance_slot_token")]

    operations = [migrations.RunPython(create, drop)]
