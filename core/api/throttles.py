"""Per-user request throttles (DRF), with their rates read from ``config.yml`` (``api``).

``CreateThrottle`` counts creates (``POST /api/containers/``), ``WriteThrottle`` every
write (POST, PUT, PATCH, DELETE). A rate left empty turns its throttle off. A throttled
request is answered 429 with code ``throttled`` and ``Retry-After`` (``core.api.errors``).
The defaults are generous (1000 creates a minute) so that a burst meets the admission
limits (maxPending, the owner's quotas), not the throttle.

Counted in the database (``core.leases.rate_hit``: one row per user, scope and rate, one
statement per throttle that applies), so every web process and host counts together.
``N/minute`` admits a burst of N, then one request every minute/N (GCRA, a token
bucket): a user who keeps asking gets exactly the rate; refused requests do not count.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from core.clients import client_address
from core.leases import LeaseScope, rate_hit


class _ConfiguredThrottle(BaseThrottle):
    """A throttle whose rate (``config_key``) is read from config at each request, counted
    per user (per client address for an anonymous request) in ``scope``."""

    scope: LeaseScope
    config_key = ""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def applies(self, request, view) -> bool:
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        rate = settings.GOBRAVE["api"][self.config_key]
        if rate is None or not self.applies(request, view):
            return True
        # "1000/minute", validated by core.config; read as DRF reads its own rates.
        number, period = SimpleRateThrottle.parse_rate(None, rate)
        user = request.user
        # An anonymous caller by its address (``core.clients``: never a header it chose).
        holder = f"user:{user.pk}" if user.is_authenticated else f"ip:{client_address(request)}"
        hit = rate_hit(scope=self.scope, holder=holder, limit=number, period=period)
        self.retry_after = hit.retry_after
        return hit.allowed

    def wait(self) -> float | None:
        return self.retry_after


class CreateThrottle(_ConfiguredThrottle):
    scope = LeaseScope.THROTTLE_CREATE
    config_key = "throttle_create"

    def applies(self, request, view) -> bool:
        return getattr(view, "action", None) == "create" and getattr(
            view, "throttle_creates", False
        )


class WriteThrottle(_ConfiguredThrottle):
    scope = LeaseScope.THROTTLE_WRITE
    config_key = "throttle_write"

    def applies(self, request, view) -> bool:
        return request.method not in SAFE_METHODS
