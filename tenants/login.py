"""Who is logging in, as the login lockout (django-axes) counts them.

django-axes locks out a user name, and an address, after ``AXES_FAILURE_LIMIT`` failed
logins (``gobrave.settings``); the address is ``core.clients.client_address``'s (behind
a reverse proxy, its header ``GOBRAVE_CLIENT_IP_HEADER``).
"""

from __future__ import annotations

import math

from axes.handlers.database import AxesDatabaseHandler
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.shortcuts import render
from django.urls import reverse


class LockoutHandler(AxesDatabaseHandler):
    """axes' database handler (``AXES_HANDLER``), minus the NUL bytes a client may send in
    the headers it records (User-Agent, Accept): PostgreSQL refuses them in text, which
    was a 500 on a login."""

    @staticmethod
    def _clean(request) -> None:
        for name in ("axes_user_agent", "axes_http_accept", "axes_path_info"):
            if isinstance(value := getattr(request, name, None), str):
                setattr(request, name, value.replace("\x00", ""))

    def user_login_failed(self, sender, credentials, request=None, **kwargs):
        self._clean(request)
        return super().user_login_failed(sender, credentials, request, **kwargs)

    def user_logged_in(self, sender, request, user, **kwargs):
        self._clean(request)
        return super().user_logged_in(sender, request, user, **kwargs)

    def user_logged_out(self, sender, request, user, **kwargs):
        self._clean(request)
        return super().user_logged_out(sender, request, user, **kwargs)


def lockout_response(request: HttpRequest, original_response=None, credentials=None):
    """The page a locked-out login gets (``AXES_LOCKOUT_CALLABLE``): 429, in the console's
    frame, saying for how long, with a link back to the login it came from (the admin's or
    the users', ``tenants.views.LoginView``: the only pages that take passwords; the API
    takes tokens)."""
    minutes = math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    context = {**admin.site.each_context(request), "title": "Too many failed logins"}
    context["minutes"] = minutes
    admin_login = reverse("admin:login")
    context["login_url"] = admin_login if request.path == admin_login else reverse("login")
    return render(request, "registration/locked_out.html", context, status=429)
