"""Reads: the quotas that apply to one owner."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from tenants.models import GroupQuota, UserQuota

QUOTA_KEYS = ("max_pending_per_owner", "max_instances_per_owner")


@dataclass(frozen=True)
class OwnerQuotas:
    """The limits for one owner; ``None`` means no limit."""

    max_pending_per_owner: int | None
    max_instances_per_owner: int | None


def owner_quotas(*, owner) -> OwnerQuotas:
    """The owner's quotas, key by key: their own override, else the most generous of their
    groups' overrides, else ``config.yml`` (contract §8). Two queries; no lock."""
    own = UserQuota.objects.filter(user_id=owner.pk).first()
    groups = list(GroupQuota.objects.filter(group__user__id=owner.pk))
    config = settings.GOBRAVE["container"]
    values = {}
    for key in QUOTA_KEYS:
        if own is not None and getattr(own, key) is not None:
            values[key] = getattr(own, key)
            continue
        granted = [getattr(row, key) for row in groups if getattr(row, key) is not None]
        values[key] = max(granted) if granted else config[key]
    return OwnerQuotas(**values)
