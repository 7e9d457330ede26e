"""History entries carry their instance's owner and their transaction's id (the events
feed, ``core.write_order``). Catalog changes only: the owner column is nullable with no
constraint, and ``txid`` is added with a constant default (old rows: 0) before its
default becomes the writing transaction's id, so the table is never rewritten."""

from django.conf import settings
from django.db import migrations, models

from core.migration_operations import add_txid


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0025_placement_and_capacity"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="containerevent",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=models.deletion.DO_NOTHING,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        add_txid("containers", "ContainerEvent"),
    ]
