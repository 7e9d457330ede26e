"""Per-user request throttles (DRF), with their rates read from ``config.yml`` (``api``).

``CreateThrottle`` counts creates (``POST /api/containers/``), ``WriteThrottle`` every
write (POST, PUT, PATCH, DELETE). A rate left empty turns its throttle off. A throttled
request is answered 429 with code ``throttled`` and ``Retry-After`` (``core.api.errors``).
The defaults are generous (1000 creates a minute) so that a burst meets the admission
limits (maxPending, the owner's quotas), not the throttle. History lives in Django's
default cache (local memory: counted per web process).
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import UserRateThrottle


class _ConfiguredThrottle(UserRateThrottle):
    """A ``UserRateThrottle`` whose rate is read from config at each request."""

    config_key = ""

    def __init__(self) -> None:  # the rate is read per request, not at start
        self.rate = None

    def applies(self, request, view) -> bool:
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        self.rate = settings.GOBRAVE["api"][self.config_key]
        if self.rate is None or not self.applies(request, view):
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)


class CreateThrottle(_ConfiguredThrottle):
    scope = "create"
    config_key = "throttle_create"

    def applies(self, request, view) -> bool:
        return getattr(view, "action", None) == "create" and getattr(
            view, "throttle_creates", False
        )


class WriteThrottle(_ConfiguredThrottle):
    scope = "write"
    config_key = "throttle_write"

    def applies(self, request, view) -> bool:
        return request.method not in SAFE_METHODS
