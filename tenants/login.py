"""Who is logging in, as the login lockout (django-axes) counts them.

django-axes locks out a user name, and an address, after ``AXES_FAILURE_LIMIT`` failed
logins (``gobrave.settings``). Behind a reverse proxy every client has the proxy's
address, so one client's failures would lock out all of them: the proxy then passes the
client's address in a header of its own (``GOBRAVE_CLIENT_IP_HEADER``), which it must
overwrite on every request so that clients cannot choose it.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.shortcuts import render


def client_address(request: HttpRequest) -> str:
    """The client's address: the proxy's header when one is configured, else the peer's."""
    header = settings.GOBRAVE_CLIENT_IP_HEADER
    if header and (forwarded := request.META.get(header, "").strip()):
        return forwarded[:64]  # a header holds what the proxy put there; bound it anyway
    return request.META.get("REMOTE_ADDR", "")


def lockout_response(request: HttpRequest, original_response=None, credentials=None):
    """The page a locked-out login gets (``AXES_LOCKOUT_CALLABLE``): 429, in the admin's
    frame, saying for how long. Only the admin's login takes passwords (the API takes
    tokens), so this is the only form a lockout ever needs."""
    minutes = math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    context = {**admin.site.each_context(request), "title": "Too many failed logins"}
    context["minutes"] = minutes
    return render(request, "registration/locked_out.html", context, status=429)
