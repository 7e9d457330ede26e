"""The ready-made groups: operators (run things) and viewers (look only)."""

from django.db import migrations

from tenants.roles import grant

OPERATORS = [
    *(f"containers.{a}_containertemplate" for a in ("view", "add", "change", "delete")),
    *(f"containers.{a}_{m}" for m in ("containerinstance", "runtime") for a in ("view", "change")),
    "containers.view_containerevent",
    "containers.view_orphancontainer",
    "outbox.view_outboxevent",
    "outbox.change_outboxevent",
]
VIEWERS = [
    *(
        f"containers.view_{m}"
        for m in ("containertemplate", "containerinstance", "runtime", "containerevent")
    ),
    "containers.view_orphancontainer",
    "outbox.view_outboxevent",
]


def forwards(apps, schema_editor):
    grant(apps, group="operators", permissions=OPERATORS)
    grant(apps, group="viewers", permissions=VIEWERS)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("containers", "0003_monitor_cursor"),
        ("outbox", "0001_initial"),
    ]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
