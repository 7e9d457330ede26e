"""Who watches a stream, kept so that the stream can ask again whether they still may.

A ``Viewer`` holds the credentials the stream was opened with (the ``Authorization``
header, the session cookie) in memory only: its ``repr`` never shows them and nothing
stores them. ``viewer_user`` authenticates them again exactly as the API does (its
``DEFAULT_AUTHENTICATION_CLASSES``, the session through Django's own ``get_user``, which
also drops a session whose password changed), so a revoked token, an expired one, a
logged-out session or a deactivated user all end the stream at its next check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings


@dataclass(frozen=True)
class Viewer:
    user_id: int
    authorization: str = field(default="", repr=False)
    session_key: str = field(default="", repr=False)


def viewer_of(request) -> Viewer:
    """The viewer of ``request`` (a Django or DRF request whose user is authenticated)."""
    django_request = getattr(request, "_request", request)
    return Viewer(
        user_id=request.user.pk,
        authorization=django_request.META.get("HTTP_AUTHORIZATION", ""),
        session_key=django_request.COOKIES.get(settings.SESSION_COOKIE_NAME, ""),
    )


def viewer_user(viewer: Viewer):
    """The viewer's user if their credentials still authenticate them, else None.

    Reads the database (token or session, and the user); runs in a thread, never on the
    event loop. Writes nothing but what the authentication classes write.
    """
    django_request = HttpRequest()
    django_request.method = "GET"
    if viewer.authorization:
        django_request.META["HTTP_AUTHORIZATION"] = viewer.authorization
    if viewer.session_key:
        django_request.COOKIES[settings.SESSION_COOKIE_NAME] = viewer.session_key
    engine = import_module(settings.SESSION_ENGINE)
    django_request.session = engine.SessionStore(viewer.session_key or None)
    django_request.user = SimpleLazyObject(lambda: get_user(django_request))
    authenticators = [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    try:
        user = Request(django_request, authenticators=authenticators).user
    except exceptions.APIException:
        return None
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    return user if user.pk == viewer.user_id else None
