from django.apps import AppConfig


class OutboxConfig(AppConfig):
    """A reusable transactional-outbox relay; it knows nothing of containers."""

    name = "outbox"
    verbose_name = "Outbox relay"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from outbox import forking

        forking.install()
