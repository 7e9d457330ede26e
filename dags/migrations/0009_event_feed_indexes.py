from django.db import migrations, models

from core.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY on PostgreSQL (writes go on), plain CREATE INDEX elsewhere.
    atomic = False

    dependencies = [("dags", "0008_event_owner_backfill")]

    operations = [
        AddIndexConcurrently(
            model_name="dagevent",
            index=models.Index(fields=["txid", "id"], name="dagevent_feed"),
        ),
        AddIndexConcurrently(
            model_name="dagevent",
            index=models.Index(fields=["owner", "txid", "id"], name="dagevent_feed_owner"),
        ),
    ]
