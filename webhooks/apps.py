from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """Signed webhooks through the outbox: registers the delivery kind and its queue."""

    name = "webhooks"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from webhooks import handlers

        handlers.register()
