"""Moved to ``containers.engines.docker.reasons``; this path stays importable."""

from containers.engines.docker.reasons import unreachable_reason

__all__ = ["unreachable_reason"]
