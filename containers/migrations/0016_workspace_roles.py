"""Operators see owners' workspaces and may remove one of an owner with no instances
left; viewers see them (tenants.roles.ROLES)."""

from django.db import migrations

from tenants.roles import grant


def forwards(apps, schema_editor):
    grant(
        apps,
        group="operators",
        permissions=["containers.view_workspace", "containers.delete_workspace"],
    )
    grant(apps, group="viewers", permissions=["containers.view_workspace"])


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0015_workspace_size"),
        ("tenants", "0001_roles"),
    ]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
