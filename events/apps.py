from django.apps import AppConfig


class EventsConfig(AppConfig):
    """The audit trail as one feed: every instance's, DAG run's and engine's history, read in
    transaction order (``GET /api/events/``, ``manage.py events_export``). Owns no table: it
    reads the apps' own history tables."""

    name = "events"
    verbose_name = "Events"
