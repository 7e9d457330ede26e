"""The one base class of every domain error, in every app.

A domain error is a request refused for a reason the caller can act on. Each app keeps
its own errors in its own ``errors.py``, all subclasses of ``DomainError``; the API's
exception handler (``core.api.errors``) maps any of them to its ``http_status`` and
the stable shape ``{"error": {"code", "message", "details"}}``, the admin and the
commands show ``message``.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A request refused for a reason the caller can act on.

    ``code`` is stable (clients switch on it), ``http_status`` is what the API answers,
    ``details`` is JSON-serializable context (the current status, the offending field).
    A subclass that carries ``retry_after`` (seconds) is answered with ``Retry-After``.
    """

    code = "domain_error"
    http_status = 400
    retry_after: float | None = None

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
