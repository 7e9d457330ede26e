import os

from django.apps import AppConfig


class ContainersConfig(AppConfig):
    """Container lifecycles; registers its request handlers with the outbox relay."""

    name = "containers"
    verbose_name = "Containers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from containers import engines
        from containers.execution import handlers, housekeeping
        from containers.queues import Queue
        from core.retention import register_purge

        handlers.register()
        if os.environ.get("Q_CLUSTER_NAME") in tuple(Queue):
            # The main process of a cluster that runs requests: its workers fork from it.
            engines.preload_in_cluster()
        # Retention (core.retention): deleted instances' and engines' history, off by default.
        register_purge("containers.deleted_instance_history", housekeeping.history_purge)
        register_purge("containers.engine_history", housekeeping.engine_history_purge)
