from django.db import migrations, models


class Migration(migrations.Migration):
    # When the engine found room for an instance it had made wait (a Pod scheduled):
    # ``start_timeout`` runs again from then, the wait not counted.

    dependencies = [
        ('containers', '0030_runtime_history'),
    ]

    operations = [
        migrations.AddField(
            model_name='containerinstance',
            name='engine_placed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
