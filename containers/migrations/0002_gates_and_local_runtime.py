"""The global gates (admission, capacity) and a Runtime row for the local engine."""

import os

from django.db import migrations


def forwards(apps, schema_editor):
    Gate = apps.get_model("containers", "Gate")
    Runtime = apps.get_model("containers", "Runtime")
    for name in ("admission", "capacity"):
        Gate.objects.get_or_create(name=name)
    Runtime.objects.get_or_create(
        name="local",
        defaults={
            "driver": "docker",
            "base_url": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
            "labels": {"engine": "docker"},
            "enabled": True,
        },
    )


class Migration(migrations.Migration):
    dependencies = [("containers", "0001_initial")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
