"""Fill in the owner of the runs' history entries written before 0006 from their runs, in
batches of 5,000 rows, each its own statement and commit (``core.batches``)."""

from django.db import migrations
from django.db.models import OuterRef, Subquery

from core.batches import update_in_batches


def backfill(apps, schema_editor):
    event = apps.get_model("dags", "DagEvent")
    run = apps.get_model("dags", "DagRun")
    owner = run.objects.filter(id=OuterRef("run_id")).values("owner_id")[:1]
    update_in_batches(
        event.objects.filter(owner__isnull=True), batch=5000, owner_id=Subquery(owner)
    )


class Migration(migrations.Migration):
    atomic = False  # each batch commits on its own

    dependencies = [("dags", "0007_event_owner_and_txid")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
