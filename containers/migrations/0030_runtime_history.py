"""An engine's history (``RuntimeEvent``): health changes, cordon, decommission, enabled
and capacity, with actor and reason, kept after the runtime row is deleted. A new table:
its ``txid`` default is the writing transaction's id from the start. Operators and
viewers see it (``tenants.roles.ROLES``)."""

import django.utils.timezone
from django.db import migrations, models

import core.write_order
from tenants.roles import grant


def roles(apps, schema_editor):
    for group in ("operators", "viewers"):
        grant(apps, group=group, permissions=["containers.view_runtimeevent"])


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0029_lifecycle_policies"),
        ("tenants", "0001_roles"),
    ]

    operations = [
        migrations.CreateModel(
            name="RuntimeEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "runtime_id",
                    models.BigIntegerField(help_text="The runtime's id (the row may be gone)."),
                ),
                ("runtime_name", models.CharField(max_length=64)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("engine.unreachable", "engine unreachable"),
                            ("engine.reachable", "engine reachable again"),
                            ("engine.cordoned", "engine cordoned"),
                            ("engine.uncordoned", "engine uncordoned"),
                            ("engine.decommissioning", "engine decommission begun"),
                            ("engine.decommissioned", "engine decommissioned"),
                            ("engine.enabled", "engine enabled"),
                            ("engine.disabled", "engine disabled"),
                            ("engine.capacity", "engine capacity changed"),
                        ],
                        max_length=64,
                    ),
                ),
                ("from_status", models.CharField(blank=True, max_length=32)),
                ("to_status", models.CharField(blank=True, max_length=32)),
                ("message", models.TextField(blank=True)),
                ("actor", models.CharField(blank=True, max_length=150)),
                ("data", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "txid",
                    models.BigIntegerField(
                        db_default=core.write_order.TransactionId(),
                        editable=False,
                        help_text="The writing transaction's id (core.write_order): the order "
                        "readers follow.",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(fields=["runtime_id", "created_at", "id"], name="rtevent_history"),
                    models.Index(fields=["txid", "id"], name="rtevent_feed"),
                    models.Index(fields=["kind", "txid", "id"], name="rtevent_feed_kind"),
                    models.Index(fields=["actor", "txid", "id"], name="rtevent_feed_actor"),
                ],
            },
        ),
        migrations.RunPython(roles, migrations.RunPython.noop),
    ]
