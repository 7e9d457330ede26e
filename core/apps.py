from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kernel: the domain-error base, counters and admin helpers."""

    name = "core"
    verbose_name = "Core"
    default_auto_field = "django.db.models.BigAutoField"
