"""Domain errors. The API maps each to one HTTP status and a stable error code."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A request refused for a reason the caller can act on."""

    code = "domain_error"
    http_status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidTransition(DomainError):
    """The instance's state does not allow the request (HTTP 409)."""

    code = "invalid_transition"
    http_status = 409


class QueueFull(DomainError):
    """maxPending is reached; retry after ``retry_after`` seconds (HTTP 429)."""

    code = "queue_full"
    http_status = 429

    def __init__(self, message: str, *, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class InvalidSpec(DomainError):
    """The template, its variables, volumes or constraints cannot make a container (400)."""

    code = "invalid_spec"
    http_status = 400


class TemplateUnavailable(InvalidSpec):
    """The template is switched off, or not open to the owner (400, ``details.field``).

    The API answers it exactly as a template that does not exist.
    """

    code = "template_unavailable"


class NoMatchingRuntime(InvalidSpec):
    """No enabled runtime satisfies the template's scheduling constraints (400)."""

    code = "no_matching_runtime"


class NotFound(DomainError):
    """No such instance (or not visible to the caller) (HTTP 404)."""

    code = "not_found"
    http_status = 404
