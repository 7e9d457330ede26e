from django.apps import AppConfig


class StreamsConfig(AppConfig):
    """Long-lived responses (a container's output, live pages) that hold no thread and no
    database connection while they wait, bounded per user and in all (docs/architecture.md,
    "The web tier"). Knows nothing of containers: the apps that stream hand it their
    sources and their access rule."""

    name = "streams"
    verbose_name = "Streams"
