from django.apps import AppConfig

from outbox import forking


class OutboxConfig(AppConfig):
    """A reusable transactional-outbox relay; it knows nothing of containers."""

    name = "outbox"
    verbose_name = "Outbox relay"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        from core.retention import register_purge
        from outbox import relay

        forking.install()
        # Retention (core.retention): sent rows, and dead letters an operator dismissed.
        register_purge("outbox.sent", lambda batch: relay.purge_sent(chunk=batch))
        register_purge("outbox.dead_letters_resolved", lambda b: relay.purge_resolved_dead(chunk=b))
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
