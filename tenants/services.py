"""Writes: users' API tokens, made, used and revoked (``tenants.models.ApiToken``).

A token's key is django-rest-knox's (64 random hex characters, ``knox.crypto``); only its
SHA-512 digest and its first 15 characters are stored. ``api_token_create`` is the one
place a key exists in full, in what it returns to its caller, who shows it once.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from knox.models import get_digest_token
from knox.settings import CONSTANTS

from core import prepared
from tenants.errors import TokenNotFound, TokenRefused
from tenants.models import NAME_MAX, ApiToken

log = logging.getLogger(__name__)

# ``last_used`` is written at most once a minute per token: a read-only request stays a
# read (one statement) for the rest of that minute.
LAST_USED_EVERY = dt.timedelta(seconds=60)


@dataclass(frozen=True)
class CreatedToken:
    """A new token's row and its key: the key is nowhere else, show it once."""

    token: ApiToken
    key: str


def api_token_create(*, user, name: str, expiry: dt.datetime | None = None) -> CreatedToken:
    """Make ``user`` a token named ``name`` (unique among theirs, 1 to 100 characters after
    trimming) that expires at ``expiry`` (aware, in the future) or never.

    Refused with ``TokenRefused`` (400, naming the field) and nothing written otherwise,
    also when the user already holds ``api.tokens_per_user`` unexpired tokens (counted
    under the user's row lock, so two creates at once never pass it together).
    Runs in its own transaction (or the caller's); the unique constraint on (user, name)
    settles two creates racing for one name. Logs the token's id and prefix, never the key.
    """
    name = (name or "").strip()
    if not name or len(name) > NAME_MAX:
        raise TokenRefused(f"A token's name is 1 to {NAME_MAX} characters.", field="name")
    if expiry is not None:
        if timezone.is_naive(expiry):
            raise TokenRefused("The expiry needs a time zone.", field="expiry")
        if expiry <= timezone.now():
            raise TokenRefused("The expiry must be in the future.", field="expiry")
    digest, key = get_digest_token()
    token = ApiToken(
        user=user,
        name=name,
        digest=digest,
        token_key=key[: CONSTANTS.TOKEN_KEY_LENGTH],
        expiry=expiry,
    )
    cap = settings.GOBRAVE["api"]["tokens_per_user"]
    try:
        with transaction.atomic():
            get_user_model().objects.select_for_update().filter(pk=user.pk).first()
            live = ApiToken.objects.filter(ApiToken.unexpired(timezone.now()), user=user)
            if live.count() >= cap:
                raise TokenRefused(
                    f"You hold {cap} API tokens already, the most allowed: revoke one first.",
                    limit=cap,
                )
            token.save(force_insert=True)
    except IntegrityError:
        if ApiToken.objects.filter(user=user, name=name).exists():
            raise TokenRefused(f"You already have a token named {name!r}.", field="name") from None
        raise
    log.info("api token %s (%s…) created for user %s", token.pk, token.token_key, user.pk)
    return CreatedToken(token=token, key=key)


def api_token_revoke(*, user, token_id: int) -> None:
    """Delete ``user``'s token ``token_id``: from the next request on, its key is refused
    (401). Another user's token, or none, raises ``TokenNotFound`` (404) and deletes
    nothing. One statement; idempotent in effect (a second revoke is a 404)."""
    deleted, _ = ApiToken.objects.filter(user=user, pk=token_id).delete()
    if not deleted:
        raise TokenNotFound("No such token.", id=token_id)
    log.info("api token %s revoked by user %s", token_id, user.pk)


def api_token_used(*, token: ApiToken, now: dt.datetime) -> None:
    """Record that ``token`` authenticated a request at ``now``: at most one UPDATE per
    ``LAST_USED_EVERY`` per token (compare-and-set on the old value, so concurrent requests
    write once), none in between. Outside or inside a transaction; never locks a row."""
    if token.last_used is not None and now - token.last_used < LAST_USED_EVERY:
        return
    prepared.update_rows(
        "tenants.api_token_used",
        lambda pk, every: (
            ApiToken.objects.filter(pk=pk).filter(
                Q(last_used__isnull=True) | Q(last_used__lt=Now() - every)
            ),
            {"last_used": Now()},
        ),
        pk=token.pk,
        every=LAST_USED_EVERY,
    )
    token.last_used = now
