from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """Signed webhooks through the outbox: registers the delivery kind and its queue, and
    the purge of finished deliveries."""

    name = "webhooks"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from core.retention import register_purge
        from webhooks import handlers
        from webhooks.retention import deliveries_purge

        handlers.register()
        register_purge("webhooks.deliveries", deliveries_purge)
