"""The streams' domain errors."""

from __future__ import annotations

from core.errors import DomainError


class StreamLimitReached(DomainError):
    """A user (or everyone together) holds as many open streams as the config allows.

    Waiting cures it (a stream ends, or its lease expires), hence 429 with ``Retry-After``.
    """

    code = "too_many_streams"
    http_status = 429

    def __init__(self, message: str, *, retry_after: float, **details) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after
