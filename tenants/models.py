"""Per-owner quota overrides an operator edits in the admin (contract §8).

Each quota is looked up key by key (``tenants.selectors.owner_quotas``): the user's own
override wins, then the most generous of the user's groups' overrides, then
``config.yml`` (``container.max_pending_per_owner``, ``container.max_instances_per_owner``).
An empty field inherits; 0 stops the owner from creating at all.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

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
