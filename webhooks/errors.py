"""Every domain error of the webhooks app (the base is ``core.errors.DomainError``)."""

from __future__ import annotations

from core.errors import DomainError


class WebhookUrlRefused(DomainError):
    """The URL is not one a delivery may go to (HTTP 400): its scheme, or an address that
    is loopback, link-local, private or otherwise not public (unless allowed)."""

    code = "webhook_url_refused"
    http_status = 400


class WebhookInvalid(DomainError):
    """A field other than the URL is invalid (HTTP 400)."""

    code = "validation_error"
    http_status = 400


class WebhookNotFound(DomainError):
    """No endpoint with that id that the caller may see (HTTP 404)."""

    code = "not_found"
    http_status = 404


class WebhooksNotAllowed(DomainError):
    """Users may not subscribe endpoints here (``webhooks.users_may_subscribe``) (HTTP 403)."""

    code = "permission_denied"
    http_status = 403
