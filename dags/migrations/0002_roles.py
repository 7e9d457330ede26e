"""Operators write DAG templates and act on runs; viewers look (SPEC 8)."""

from django.db import migrations

from tenants.roles import grant

OPERATORS = [
    *(f"dags.{a}_dagtemplate" for a in ("view", "add", "change", "delete")),
    "dags.view_dagrun",
    "dags.change_dagrun",
    "dags.view_dagevent",
]
VIEWERS = ["dags.view_dagtemplate", "dags.view_dagrun", "dags.view_dagevent"]


def forwards(apps, schema_editor):
    grant(apps, group="operators", permissions=OPERATORS)
    grant(apps, group="viewers", permissions=VIEWERS)


class Migration(migrations.Migration):
    dependencies = [
        ("dags", "0001_initial"),
        ("tenants", "0001_roles"),
    ]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
