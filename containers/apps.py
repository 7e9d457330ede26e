from django.apps import AppConfig


class ContainersConfig(AppConfig):
    """Container lifecycles; registers its request handlers with the outbox relay."""

    name = "containers"
    verbose_name = "Containers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from containers.execution import handlers, housekeeping
        from core.retention import register_purge

        handlers.register()
        # Retention (core.retention): deleted instances' and engines' history, off by default.
        register_purge("containers.deleted_instance_history", housekeeping.history_purge)
        register_purge("containers.engine_history", housekeeping.engine_history_purge)
