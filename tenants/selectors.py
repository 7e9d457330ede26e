"""Reads: the quotas that apply to one owner, and users' API tokens."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import IntegerField, Value

from core import prepared
from tenants.models import ApiToken, GroupQuota, UserQuota

QUOTA_KEYS = ("max_pending_per_owner", "max_instances_per_owner")


@dataclass(frozen=True)
class OwnerQuotas:
    """The limits for one owner; ``None`` means no limit."""

    max_pending_per_owner: int | None
    max_instances_per_owner: int | None


def _overrides(*, user: int):
    """The owner's own override (kind 0), then their groups' (kind 1): one statement."""
    kind = {"kind": Value(0, output_field=IntegerField())}
    own = UserQuota.objects.filter(user_id=user).order_by().annotate(**kind)
    kind = {"kind": Value(1, output_field=IntegerField())}
    granted = GroupQuota.objects.filter(group__user=user).order_by().annotate(**kind)
    return own.values_list(*QUOTA_KEYS, "kind").union(
        granted.values_list(*QUOTA_KEYS, "kind"), all=True
    )


def owner_quotas(*, owner) -> OwnerQuotas:
    """The owner's quotas, key by key: their own override, else the most generous of their
    groups' overrides, else ``config.yml`` (contract §8). One query (every create asks:
    compiled once, prepared on PostgreSQL); no lock."""
    rows = prepared.rows("tenants.owner_quotas", _overrides, user=owner.pk)
    own = [dict(zip(QUOTA_KEYS, row[:-1], strict=True)) for row in rows if row[-1] == 0]
    groups = [dict(zip(QUOTA_KEYS, row[:-1], strict=True)) for row in rows if row[-1] == 1]
    config = settings.GOBRAVE["container"]
    values = {}
    for key in QUOTA_KEYS:
        if own and own[0][key] is not None:
            values[key] = own[0][key]
            continue
        granted = [row[key] for row in groups if row[key] is not None]
        values[key] = max(granted) if granted else config[key]
    return OwnerQuotas(**values)


def api_tokens_by_prefix(prefix: str) -> list[ApiToken]:
    """The tokens whose key starts with ``prefix`` (knox's ``token_key``, the key's first 15
    characters: almost always one), each with its user. Every API request authenticates
    through this: one statement on an index, compiled once, prepared on PostgreSQL
    (``core.prepared``); the caller compares digests."""
    return prepared.objects(
        "tenants.api_tokens_by_prefix",
        lambda prefix: ApiToken.objects.select_related("user").filter(token_key=prefix).order_by(),
        prefix=prefix,
    )


def api_tokens_of(*, user):
    """``user``'s tokens, newest first (expired ones too, until revoked); never the key,
    which is stored nowhere."""
    return ApiToken.objects.filter(user=user).order_by("-created", "-id")
