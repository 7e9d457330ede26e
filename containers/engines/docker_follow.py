"""Moved to ``containers.engines.docker.follow``; this path stays importable."""

from containers.engines.docker.follow import follow

__all__ = ["follow"]
