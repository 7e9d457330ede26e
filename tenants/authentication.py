"""The API's authentication classes (``REST_FRAMEWORK`` settings): token and session.

DRF's token and session authentication send any key or cookie, NUL bytes included, to
the database (PostgreSQL refuses them with an error, a 500); here they are 401s. The
token and its user are read in one prepared statement (``tenants.selectors``).
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular import authentication as spectacular_auth
from rest_framework import authentication, exceptions

from tenants.selectors import token_with_user


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication, refusing a malformed key before it reaches the database.

    Keys are 40 hex characters; anything else (a NUL byte among them, which PostgreSQL
    cannot even compare) is an invalid token, answered 401 like any unknown key.
    """

    def authenticate_credentials(self, key):
        if not (0 < len(key) <= 40 and key.isascii() and key.isalnum()):
            raise exceptions.AuthenticationFailed("Invalid token.")
        found = token_with_user(key)  # every API request: one prepared statement
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        token, user = found
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return user, token


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session authentication, ignoring a session cookie that cannot be a session key.

    Django looks any cookie value up in the database, and PostgreSQL refuses NUL bytes
    with an error (a 500); such a cookie authenticates nobody instead.
    """

    def authenticate(self, request):
        key = request._request.COOKIES.get(settings.SESSION_COOKIE_NAME)
        if key is not None and not (key.isascii() and key.isalnum()):
            return None
        return super().authenticate(request)


class SessionScheme(spectacular_auth.SessionScheme):
    """Documents ``SessionAuthentication`` above as the cookie scheme (drf-spectacular)."""

    target_class = SessionAuthentication
