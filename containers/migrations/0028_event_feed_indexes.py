from django.db import migrations, models

from core.migration_operations import AddIndexConcurrently


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY on PostgreSQL (writes go on), plain CREATE INDEX elsewhere.
    atomic = False

    dependencies = [("containers", "0027_event_owner_backfill")]

    operations = [
        AddIndexConcurrently(
            model_name="containerevent",
            index=models.Index(fields=[*key, "txid", "id"], name=name),
        )
        for key, name in (
            ((), "event_feed"),
            (("owner",), "event_feed_owner"),
            (("instance_id",), "event_feed_instance"),
            (("kind",), "event_feed_kind"),
            (("actor",), "event_feed_actor"),
        )
    ]
