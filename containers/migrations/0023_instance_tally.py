"""PostgreSQL: instances by runtime and status, kept current by the writes (``core.Tally``).

``/metrics`` (``gobrave_instances``, ``gobrave_engine_instances``) and the runtime loads
read the tally ``containers.instances`` (key ``"<runtime_id> <status>"``, the id empty while a create waits unplaced) instead of
counting a table that grows with every instance ever made. Installing the triggers
locks the table against writers until the migration commits, so the seed count is
exact. Nothing on SQLite (its readers count the table).
"""

from django.db import migrations

from core.tallies import trigger_sql

CREATE, DROP = trigger_sql(
    tally="containers.instances",
    table="containers_containerinstance",
    key="coalesce(runtime_id::text, '') || ' ' || status",  # a pending create: unplaced
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0022_instance_engine_waiting"),
        ("core", "0003_tally"),
    ]

    operations = [migrations.RunPython(create, drop)]
