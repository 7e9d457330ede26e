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


class LeaseLimitReached(DomainError):
    """A lease is refused: its holder's or its scope's limit of live leases is reached
    (HTTP 429, code ``lease_limit``); nothing was created.

    ``limit`` names the limit that refused it (``"per_holder"`` or ``"total"``) and
    ``number`` is that limit, both in ``details`` too. Releasing or letting a lease expire
    makes room, so a retry may succeed; the caller words the message for its users.
    """

    code = "lease_limit"
    http_status = 429

    def __init__(self, *, scope: str, limit: str, number: int) -> None:
        which = "per-holder" if limit == "per_holder" else "total"
        super().__init__(
            f"{scope}: the {which} limit of {number} live leases is reached",
            scope=scope,
            limit=limit,
            number=number,
        )
        self.scope, self.limit, self.number = scope, limit, number
