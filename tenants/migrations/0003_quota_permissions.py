"""Operators edit the quota overrides; viewers see them."""

from django.db import migrations

from tenants.roles import grant

QUOTAS = ("userquota", "groupquota")


def forwards(apps, schema_editor):
    grant(
        apps,
        group="operators",
        permissions=[f"tenants.{a}_{m}" for m in QUOTAS for a in ("view", "add", "change", "delete")],
    )
    grant(apps, group="viewers", permissions=[f"tenants.view_{m}" for m in QUOTAS])


class Migration(migrations.Migration):
    dependencies = [("tenants", "0002_quotas")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
