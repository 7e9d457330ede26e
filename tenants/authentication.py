"""The API's authentication classes (``REST_FRAMEWORK`` settings): token and session.

Tokens are django-rest-knox's, stored as SHA-512 digests (``tenants.models.ApiToken``).
knox's own ``authenticate_credentials`` reads the candidates and then every token of the
user (deleting the expired ones) on each request; here the candidates and their user are
one prepared statement (``tenants.selectors``), an expired token is refused and kept
(its owner sees it listed as expired), and ``last_used`` is written at most once a
minute. DRF's session authentication sends any cookie, NUL bytes included, to the
database (PostgreSQL refuses them with an error, a 500); here that is nobody.
"""

from __future__ import annotations

from hmac import compare_digest

from django.conf import settings
from django.utils import timezone
from drf_spectacular import authentication as spectacular_auth
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox import auth as knox_auth
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework import authentication, exceptions

from tenants.selectors import api_tokens_by_prefix
from tenants.services import api_token_used

# knox's keys: 64 hex characters; keys made before knox (DRF's, migrated): 40.
KEY_MAX = 64


class TokenAuthentication(knox_auth.TokenAuthentication):
    """``Authorization: Token <key>``: knox's digests, checked in one statement.

    A key that cannot be one (too long, not ASCII letters and digits: a NUL byte, which
    PostgreSQL cannot even compare, or bytes that are not UTF-8) is an invalid token,
    answered 401 like an unknown key; so are an expired token and an inactive user's.
    """

    def authenticate_credentials(self, token: bytes):
        try:
            key = token.decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if not (0 < len(key) <= KEY_MAX and key.isalnum()):
            raise exceptions.AuthenticationFailed("Invalid token.")
        digest = hash_token(key)
        for candidate in api_tokens_by_prefix(key[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if compare_digest(digest, candidate.digest):
                return self._accept(candidate)
        raise exceptions.AuthenticationFailed("Invalid token.")

    def _accept(self, token):
        now = timezone.now()
        if token.expired(now):
            raise exceptions.AuthenticationFailed("Token expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        api_token_used(token=token, now=now)
        return token.user, token


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


class TokenScheme(KnoxTokenScheme):
    """Documents ``TokenAuthentication`` above as ``tokenAuth`` (the name DRF's token scheme
    had, so that generated clients keep theirs): ``Authorization: Token <key>``."""

    target_class = TokenAuthentication
    name = "tokenAuth"
