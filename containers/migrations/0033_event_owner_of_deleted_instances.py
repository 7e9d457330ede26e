"""Correct the owner of history entries of deleted instances that 0027 gave to the
instance's creator (before it was fixed): wherever the owner can be known exactly (the
instance's requests in the outbox, or its DAG run: ``0027.deleted_owners``), their
entries get that owner. Entries whose owner cannot be known keep what 0027 gave them
(the creator; on a database that ran the fixed 0027, the creator only when not staff).

Only entries that 0027 filled are read: those written before 0026 (``txid`` 0; the later
ones carry their owner from the instance that wrote them). Elsewhere than PostgreSQL every
entry has ``txid`` 0: there, all entries of deleted instances are checked, which changes
only wrong ones (an exact owner never differs from a right one). A statement per owner and
``CHUNK`` instances; idempotent.
"""

import importlib

from django.db import migrations

backfill = importlib.import_module("containers.migrations.0027_event_owner_backfill")


def correct(apps, schema_editor):
    event = apps.get_model("containers", "ContainerEvent")
    written_before_0026 = event.objects.filter(txid=0)
    instances = backfill.deleted_instances(apps, written_before_0026)
    owners = backfill.deleted_owners(apps, instances)
    backfill.owners_set(written_before_0026, owners)


class Migration(migrations.Migration):
    atomic = False  # each statement commits on its own

    dependencies = [
        ("containers", "0032_workspace_retention_per_template"),
        ("outbox", "0004_fair_share"),
        ("dags", "0001_initial"),
    ]

    operations = [migrations.RunPython(correct, migrations.RunPython.noop, elidable=True)]
