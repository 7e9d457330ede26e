"""The authentication backend: Django's ``ModelBackend``, with a user's permissions read in
one statement.

Every API answer and admin page asks permissions (who sees secrets, host paths, every
instance). ``ModelBackend`` reads a user's own and their groups' permissions with two
ORM queries on first use in a request, and building them costs more than running them.
Here one statement reads both (a queryset compiled once, prepared on PostgreSQL:
``core.prepared``); the rules (an inactive user has none, a superuser has all, the set is
cached on the user object for the rest of the request) are ``ModelBackend``'s.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.db.models import Q

from core import prepared


def _granted(*, user: int):
    """The user's own permissions and their groups', as (app label, codename)."""
    user_model = get_user_model()
    own = user_model.user_permissions.through.objects.filter(user_id=user)
    membership = user_model.groups.through.objects.filter(user_id=user)
    granted = Group.permissions.through.objects.filter(group_id__in=membership.values("group_id"))
    rows = Permission.objects.filter(
        Q(id__in=own.values("permission_id")) | Q(id__in=granted.values("permission_id"))
    )
    return rows.order_by().values_list("content_type__app_label", "codename")


class PermissionsBackend(ModelBackend):
    """``ModelBackend`` whose ``get_all_permissions`` is one statement (module docstring)."""

    def get_all_permissions(self, user_obj, obj=None):
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if user_obj.is_superuser:
            return super().get_all_permissions(user_obj, obj)
        if not hasattr(user_obj, "_perm_cache"):
            rows = prepared.rows("tenants.permissions", _granted, user=user_obj.pk)
            user_obj._perm_cache = {f"{app}.{codename}" for app, codename in rows}
        return user_obj._perm_cache
