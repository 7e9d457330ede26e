from django.db import migrations


def unwatch_rows_not_running(apps, schema_editor):
    """Rows that left ``running`` before the transitions cleared their idle watch kept
    ``idle_since``: never selected (the watch reads running rows), they stayed at the
    front of ``instance_policy_idle_turn``. Clear them as the transitions now do (an
    unpause or a start arms the watch again). Few rows (paused or on their way to a
    stop or start, under an idle rule), read through that partial index."""
    instance = apps.get_model("containers", "ContainerInstance")
    instance.objects.filter(idle_since__isnull=False).exclude(status="running").update(
        idle_since=None, cpu_sample=None
    )


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0034_instance_idle_turn"),
    ]

    operations = [
        migrations.RunPython(unwatch_rows_not_running, migrations.RunPython.noop, elidable=True),
    ]
