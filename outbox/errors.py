"""Every domain error of the outbox (the base is ``core.errors.DomainError``)."""

from __future__ import annotations

from core.errors import DomainError


class NotRetriable(DomainError):
    """Only a ``pending`` row waiting on backoff can be made due now (HTTP 409)."""

    code = "not_retriable"
    http_status = 409


class OutboxRowNotFound(DomainError):
    """No outbox row with that id (HTTP 404)."""

    code = "not_found"
    http_status = 404


class NotDead(DomainError):
    """Only a dead letter (a ``dead`` row) can be dismissed (HTTP 409)."""

    code = "not_dead"
    http_status = 409


class NotRequeuable(DomainError):
    """A dead letter cannot be requeued (HTTP 409): it is already resolved (dismissed, or
    requeued once: one dead letter runs again at most once), or no handler runs its kind
    any more."""

    code = "not_requeuable"
    http_status = 409
