"""Counters move to the shared kernel (core.Counter); "retrying" is now "retried"."""

from django.db import migrations


def copy_counters(apps, schema_editor):
    RelayCounter = apps.get_model("outbox", "RelayCounter")
    Counter = apps.get_model("core", "Counter")
    Counter.objects.bulk_create(
        [
            Counter(minute=row.minute, name=row.name, count=row.count)
            for row in RelayCounter.objects.iterator(chunk_size=2000)
        ],
        batch_size=2000,
        ignore_conflicts=True,
    )
    OutboxEvent = apps.get_model("outbox", "OutboxEvent")
    OutboxEvent.objects.filter(outcome="retrying").update(outcome="retried")


def copy_back(apps, schema_editor):
    RelayCounter = apps.get_model("outbox", "RelayCounter")
    Counter = apps.get_model("core", "Counter")
    RelayCounter.objects.bulk_create(
        [RelayCounter(minute=r.minute, name=r.name, count=r.count) for r in Counter.objects.all()],
        ignore_conflicts=True,
    )
    OutboxEvent = apps.get_model("outbox", "OutboxEvent")
    OutboxEvent.objects.filter(outcome="retried").update(outcome="retrying")


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0001_initial"),
        ("outbox", "0004_fair_share"),
    ]

    operations = [
        migrations.RunPython(copy_counters, copy_back),
        migrations.DeleteModel(name="RelayCounter"),
    ]
