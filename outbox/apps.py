from django.apps import AppConfig

from outbox import forking


class OutboxConfig(AppConfig):
    """A reusable transactional-outbox relay; it knows nothing of containers."""

    name = "outbox"
    verbose_name = "Outbox relay"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        forking.install()
        # django-q2 workers buffer the relay's counters (one write per second, not per row).
        post_spawn.connect(_buffer_counters, dispatch_uid="outbox-counters")
        # A worker sent SIGTERM mid-handler finishes it first (outbox.stopping).
        post_spawn.connect(_stop_gracefully, dispatch_uid="outbox-stopping")


def _stop_gracefully(sender, **kwargs) -> None:
    from outbox import stopping

    stopping.install_in_worker()


def _buffer_counters(sender, **kwargs) -> None:
    """A django-q2 worker: counters buffered (one write per second, not per row), and
    connections unchecked (``forking.health_checks_off``) and given back at most once a
    second (``forking.connection_checks_throttled``)."""
    from core import counters

    counters.counters_buffer_start()
    forking.health_checks_off()
    forking.connection_checks_throttled()
