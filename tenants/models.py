"""Per-owner quota overrides an operator edits in the admin (contract §8), and users' API
tokens.

Each quota is looked up key by key (``tenants.selectors.owner_quotas``): the user's own
override wins, then the most generous of the user's groups' overrides, then
``config.yml`` (``container.max_pending_per_owner``, ``container.max_instances_per_owner``).
An empty field inherits; 0 stops the owner from creating at all.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from knox.models import AbstractAuthToken
from knox.settings import CONSTANTS

NAME_MAX = 100
_INHERIT = "Empty: inherit (user: from the groups, then config.yml; group: from config.yml)."


class QuotaOverride(models.Model):
    max_pending_per_owner = models.PositiveIntegerField(
        null=True, blank=True, help_text=f"Create requests waiting at once. {_INHERIT}"
    )
    max_instances_per_owner = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=f"Instances not deleted and not being deleted. {_INHERIT}",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class UserQuota(QuotaOverride):
    """One user's own quotas; they win over the groups' and the configuration's."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="quota"
    )

    class Meta:
        verbose_name = "user quota"

    def __str__(self) -> str:
        return f"quota of {self.user}"


class GroupQuota(QuotaOverride):
    """A group's quotas; a member gets the most generous of their groups' values."""

    group = models.OneToOneField("auth.Group", on_delete=models.CASCADE, related_name="quota")

    class Meta:
        verbose_name = "group quota"

    def __str__(self) -> str:
        return f"quota of group {self.group}"


class ApiToken(AbstractAuthToken):
    """A user's API token, stored as django-rest-knox stores it: the SHA-512 ``digest`` of
    the key and its first 15 characters (``token_key``, the lookup index and the prefix a
    user recognises it by); the key itself is shown once, at creation, and kept nowhere.

    knox's own extension point (``KNOX_TOKEN_MODEL``, ``AbstractAuthToken``) rather than a
    second table beside knox's: one row per token, read in one statement on every API
    request, with the fields knox lacks (``name``, ``last_used``). The primary key is a
    number, not knox's ``digest``, so that URLs and the admin never carry the hash.
    A user's token names are unique. ``expiry`` None: never expires.
    """

    id = models.BigAutoField(primary_key=True)
    digest = models.CharField(max_length=CONSTANTS.DIGEST_LENGTH, unique=True)
    name = models.CharField(max_length=NAME_MAX, help_text="What the token is for, e.g. ci.")
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="api_token_name_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key}…) of {self.user_id}"

    def expired(self, now: dt.datetime) -> bool:
        """The one expiry rule: a token with an expiry at or before ``now`` is refused."""
        return self.expiry is not None and self.expiry <= now

    @classmethod
    def unexpired(cls, now: dt.datetime) -> models.Q:
        """``expired``'s rule as a filter: the tokens still valid at ``now``."""
        return models.Q(expiry__isnull=True) | models.Q(expiry__gt=now)
