from django.db import migrations, models


class Migration(migrations.Migration):
    # Whether a runtime's engine gives CPU figures (a Kubernetes cluster's metrics API),
    # as last asked: the validation of a template's idle_timeout reads it.

    dependencies = [
        ("containers", "0035_instance_idle_watch_only_running"),
    ]

    operations = [
        migrations.AddField(
            model_name="runtime",
            name="serves_stats",
            field=models.BooleanField(
                blank=True,
                editable=False,
                help_text="Whether the engine reports CPU use (Kubernetes: serves "
                "metrics.k8s.io), as last checked; empty: not checked yet.",
                null=True,
            ),
        ),
    ]
