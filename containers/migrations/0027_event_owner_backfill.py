"""Fill in the owner of the history entries written before 0020, in batches of 5,000
rows, each its own statement and commit (``core.batches``): the history table stays
writable throughout.

1. Entries of instances that still exist: their owner.
2. Entries of deleted instances: the user whose request created the instance (the
   create entry's actor, ``user:<name>``). Instances a DAG run created keep no owner
   here (their runs' history has it); operators see those entries.
"""

from django.db import migrations
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Substr

from core.batches import update_in_batches

BATCH = 5000


def backfill(apps, schema_editor):
    from django.conf import settings

    event = apps.get_model("containers", "ContainerEvent")
    instance = apps.get_model("containers", "ContainerInstance")
    user = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    missing = event.objects.filter(owner__isnull=True)
    live = instance.objects.filter(id=OuterRef("instance_id")).values("owner_id")[:1]
    update_in_batches(missing, batch=BATCH, owner_id=Subquery(live))
    creator = (
        event.objects.filter(
            instance_id=OuterRef(OuterRef("instance_id")),
            kind="ContainerCreateRequest",
            actor__startswith="user:",
        )
        .annotate(name=Substr("actor", 6))
        .values("name")[:1]
    )
    by_name = user.objects.filter(username=Subquery(creator)).values("id")[:1]
    update_in_batches(
        event.objects.filter(owner__isnull=True), batch=BATCH, owner_id=Subquery(by_name)
    )


class Migration(migrations.Migration):
    atomic = False  # each batch commits on its own

    dependencies = [("containers", "0026_event_owner_and_txid")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
