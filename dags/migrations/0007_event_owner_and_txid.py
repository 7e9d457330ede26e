"""A run's history entries carry the run's owner and their transaction's id (the events
feed, ``core.write_order``); catalog changes only, as containers 0020."""

from django.conf import settings
from django.db import migrations, models

from core.migration_operations import add_txid


class Migration(migrations.Migration):
    dependencies = [
        ("dags", "0006_tallies"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="dagevent",
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
        add_txid("dags", "DagEvent"),
    ]
