"""A template's ``command`` is a list of words everywhere.

A command stored as one string was run with ``sh -c``: it becomes ``["sh", "-c",
<the string>]``, so every template runs exactly what it ran before (an empty string
becomes ``[]``, the image's own command).
"""

from django.db import migrations, models


def strings_to_lists(apps, schema_editor):
    Template = apps.get_model("containers", "ContainerTemplate")
    for template in Template.objects.all().only("pk", "command"):
        if isinstance(template.command, str):
            command = ["sh", "-c", template.command] if template.command else []
            Template.objects.filter(pk=template.pk).update(command=command)


class Migration(migrations.Migration):
    dependencies = [
        ("containers", "0013_instance_name_per_owner"),
    ]

    operations = [
        migrations.RunPython(strings_to_lists, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="containertemplate",
            name="command",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="The words the container runs, a list of strings (no shell unless "
                'named: ["sh", "-c", "..."]); empty: the image\'s own.',
            ),
        ),
    ]
