"""User env by allow-list (issue 26): rules the policy refuses now leave ``user_env``.

A template saved with a bare ``*``, or with a rule that could open a key some runtime
reads at start-up (``PYTHON*``, ``PAGER``...), loses that rule; the rule and the reason go
to ``user_env_removed``, which the admin shows on the template until it is saved again.
Already such rules opened nothing at request time (``env_policy.split_rules``); this makes
the stored template say so. Running it again changes nothing more.
"""

from django.db import migrations, models

from containers.spec.env_policy import split_rules


def drop_refused_user_env_rules(apps, schema_editor):
    Template = apps.get_model("containers", "ContainerTemplate")
    for template in Template.objects.order_by("pk").iterator():
        split = split_rules(template.user_env)
        if not split.refused:
            continue
        template.user_env = split.kept
        template.user_env_removed = [*(template.user_env_removed or []), *split.refused]
        template.save(update_fields=["user_env", "user_env_removed"])


class Migration(migrations.Migration):

    dependencies = [
        ('containers', '0011_admission_function'),
    ]

    operations = [
        migrations.AddField(
            model_name='containertemplate',
            name='user_env_removed',
            field=models.JSONField(blank=True, default=list, editable=False, help_text='user_env rules an upgrade removed because they are refused now ({"rule", "reason"}); shown in the admin until the template is saved again.'),
        ),
        migrations.AlterField(
            model_name='containertemplate',
            name='user_env',
            field=models.JSONField(blank=True, default=list, help_text='The env keys users may set: KEY, APP_* (a prefix of your own ending in _*), or {"name": ..., "pattern": regex for the value, "max_length": n}. Never *, nor a key some runtime reads at start-up. A key the template sets is replaced only when named exactly.'),
        ),
        migrations.RunPython(drop_refused_user_env_rules, migrations.RunPython.noop),
    ]
