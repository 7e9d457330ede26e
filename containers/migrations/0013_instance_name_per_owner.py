"""An owner's instance names become unique (``instance_name_per_owner``).

Existing duplicates are renamed first, deterministically: within each (owner, name)
group the oldest instance (created_at, then id) keeps the name; each other one becomes
``<name>-<the first 8 hex digits of its id>`` (more digits if that is taken too; the
name cut so the whole fits 128 characters), and its history says so.
"""

from django.conf import settings
from django.db import migrations, models
from django.db.models import Count

MAX_NAME = 128


def rename_duplicates(apps, schema_editor):
    Instance = apps.get_model("containers", "ContainerInstance")
    Event = apps.get_model("containers", "ContainerEvent")
    groups = (
        Instance.objects.values("owner_id", "name")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("owner_id", "name")
    )
    for group in groups:
        rows = Instance.objects.filter(owner_id=group["owner_id"], name=group["name"])
        taken = set(
            Instance.objects.filter(owner_id=group["owner_id"]).values_list("name", flat=True)
        )
        for row in list(rows.order_by("created_at", "id"))[1:]:
            digits = row.id.hex
            for length in range(8, 33):
                suffix = f"-{digits[:length]}"
                new = f"{row.name[: MAX_NAME - len(suffix)]}{suffix}"
                if new not in taken:
                    break
            taken.add(new)
            Instance.objects.filter(pk=row.pk).update(name=new)
            Event.objects.create(
                instance_id=row.pk,
                instance_name=new,
                kind="renamed",
                from_status=row.status,
                to_status=row.status,
                message=f"renamed from {row.name} to {new}: an owner's instance names "
                "are unique now and an older instance has that name",
                actor="system:migration",
                data={"old_name": row.name, "new_name": new},
            )


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0012_user_env_allow_list"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(rename_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="containerinstance",
            constraint=models.UniqueConstraint(
                fields=("owner", "name"), name="instance_name_per_owner"
            ),
        ),
    ]
