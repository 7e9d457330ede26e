"""Every domain error of the tenants app (the base is ``core.errors.DomainError``)."""

from __future__ import annotations

from core.errors import DomainError


class TokenRefused(DomainError):
    """A token request the service refuses (HTTP 400): ``details`` names the field."""

    code = "invalid"
    http_status = 400


class TokenNotFound(DomainError):
    """No such token of this user: another user's answers exactly as a missing one (404)."""

    code = "not_found"
    http_status = 404
