from django.apps import AppConfig


class DagsConfig(AppConfig):
    """DAG runs: registers the advance handler and listens to the containers' signals."""

    name = "dags"
    verbose_name = "DAG runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from containers.signals import (
            instance_moved,
            instance_removed,
            runtime_decommissioned,
            runtime_placements,
        )
        from dags import handlers, receivers

        handlers.register()
        instance_moved.connect(receivers.on_instance_moved, dispatch_uid="dags.moved")
        instance_removed.connect(receivers.on_instance_removed, dispatch_uid="dags.removed")
        runtime_placements.connect(receivers.on_runtime_placements, dispatch_uid="dags.placed")
        runtime_decommissioned.connect(
            receivers.on_runtime_decommissioned, dispatch_uid="dags.decommissioned"
        )
