"""This installation's own id (made at the first migrate), and one actor vocabulary.

1. The ``Installation`` row: a random ``gb-<12 hex>`` id on a new database; a database
   that already holds instances keeps the former default ``gobrave``, which its
   containers carry as their label.
2. History actors written before the vocabulary (``admin:<name>``, ``cli:<name>`` and
   the API's bare ``<name>``) become ``user:<name>``; gobrave's own parts keep theirs.
"""

import secrets

from django.db import migrations, models
from django.db.models import Value
from django.db.models.functions import Concat, Substr

SYSTEM = ("worker", "monitor", "reconciler", "relay")


def make_installation(apps, schema_editor):
    Installation = apps.get_model("containers", "Installation")
    ContainerInstance = apps.get_model("containers", "ContainerInstance")
    if Installation.objects.exists():
        return
    legacy = ContainerInstance.objects.exists()
    value = "gobrave" if legacy else f"gb-{secrets.token_hex(6)}"
    Installation.objects.create(pk=1, installation_id=value)


def rename_actors(apps, schema_editor):
    ContainerEvent = apps.get_model("containers", "ContainerEvent")
    for prefix in ("admin:", "cli:"):
        ContainerEvent.objects.filter(actor__startswith=prefix).update(
            actor=Concat(Value("user:"), Substr("actor", len(prefix) + 1))
        )
    ContainerEvent.objects.exclude(actor__contains=":").exclude(actor="").exclude(
        actor__in=SYSTEM
    ).update(actor=Concat(Value("user:"), "actor"))


class Migration(migrations.Migration):
    dependencies = [("containers", "0005_template_env_policy")]

    operations = [
        migrations.CreateModel(
            name="Installation",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(
                        default=1, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("installation_id", models.CharField(max_length=63, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.RunPython(make_installation, migrations.RunPython.noop),
        migrations.RunPython(rename_actors, migrations.RunPython.noop),
    ]
