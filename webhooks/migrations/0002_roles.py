"""Operators manage every webhook endpoint; viewers see them (SPEC 8)."""

from django.db import migrations

from tenants.roles import grant

OPERATORS = [f"webhooks.{a}_webhookendpoint" for a in ("view", "add", "change", "delete")]
VIEWERS = ["webhooks.view_webhookendpoint"]


def forwards(apps, schema_editor):
    grant(apps, group="operators", permissions=OPERATORS)
    grant(apps, group="viewers", permissions=VIEWERS)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0001_initial"),
        ("tenants", "0001_roles"),
    ]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
