"""The authentication backend: Django's ``ModelBackend``, with a user's permissions read in
one statement.

Every API answer and admin page asks permissions (who sees secrets, host paths, every
instance). ``ModelBackend`` reads a user's own and their groups' permissions with two
ORM queries on first use in a request, and building them costs more than running them.
Here one statement reads both (prepared on PostgreSQL); the rules (an inactive user
has none, a superuser has all, the set is cached on the user object for the rest of
the request) are ``ModelBackend``'s.
"""

from __future__ import annotations

import functools

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from core import prepared


@functools.cache  # the tables never change in a process: built once, not per request
def _permissions_sql() -> str:
    user_model = get_user_model()
    permission = Permission._meta.db_table
    content_type = ContentType._meta.db_table
    own = user_model.user_permissions.through._meta.db_table
    membership = user_model.groups.through._meta.db_table
    granted = Group.permissions.through._meta.db_table
    return (
        f"SELECT ct.app_label, p.codename FROM {permission} p "
        f"JOIN {content_type} ct ON ct.id = p.content_type_id "
        f"WHERE p.id IN (SELECT permission_id FROM {own} WHERE user_id = %s "
        f"UNION SELECT g.permission_id FROM {granted} g "
        f"JOIN {membership} m ON m.group_id = g.group_id WHERE m.user_id = %s)"
    )


class PermissionsBackend(ModelBackend):
    """``ModelBackend`` whose ``get_all_permissions`` is one statement (module docstring)."""

    def get_all_permissions(self, user_obj, obj=None):
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if user_obj.is_superuser:
            return super().get_all_permissions(user_obj, obj)
        if not hasattr(user_obj, "_perm_cache"):
            rows = prepared.fetchall(_permissions_sql(), [user_obj.pk, user_obj.pk])
            user_obj._perm_cache = {f"{app}.{codename}" for app, codename in rows}
        return user_obj._perm_cache
