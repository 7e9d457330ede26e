"""A run's history entries carry the run's owner and their transaction's id (the events
feed, ``core.write_order``); catalog changes only, as containers 0020."""

from django.conf import settings
from django.db import migrations, models

import core.write_order


def add_txid(apps, schema_editor):
    table = apps.get_model("dags", "DagEvent")._meta.db_table
    for sql in core.write_order.add_txid_sql(schema_editor.connection.vendor, table):
        schema_editor.execute(sql)


def drop_txid(apps, schema_editor):
    table = apps.get_model("dags", "DagEvent")._meta.db_table
    schema_editor.execute(f'ALTER TABLE "{table}" DROP COLUMN "txid"')


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
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(add_txid, drop_txid)],
            state_operations=[
                migrations.AddField(
                    model_name="dagevent", name="txid", field=core.write_order.txid_field()
                )
            ],
        ),
    ]
