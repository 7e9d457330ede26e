"""The monitor's cursor becomes an opaque string (a Kubernetes ``resourceVersion`` is not
a nanosecond time): ``time_nano`` moves into ``position`` as its decimal text."""

from django.db import migrations, models


def forwards(apps, schema_editor):
    MonitorCursor = apps.get_model("containers", "MonitorCursor")
    for cursor in MonitorCursor.objects.filter(time_nano__gt=0):
        cursor.position = str(cursor.time_nano)
        cursor.save(update_fields=["position"])


def backwards(apps, schema_editor):
    MonitorCursor = apps.get_model("containers", "MonitorCursor")
    for cursor in MonitorCursor.objects.exclude(position=""):
        cursor.time_nano = int(cursor.position) if cursor.position.isdigit() else 0
        cursor.save(update_fields=["time_nano"])


class Migration(migrations.Migration):
    dependencies = [("containers", "0019_list_indexes")]

    operations = [
        migrations.AddField(
            model_name="monitorcursor",
            name="position",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveField(model_name="monitorcursor", name="time_nano"),
    ]
