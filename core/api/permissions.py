"""The API's one permission rule: each action names the model permissions it needs.

The staff flag only opens the admin; here it grants nothing. A view lists, per action
(``list``, ``retrieve``, ``create``, ``retry``...; an ``APIView`` per HTTP method), the
``app_label.codename`` permissions a caller must hold, exactly as the admin checks them
(a superuser holds every permission). An action the view does not list needs only a
login; the view then applies its own per-object rule (a user's own instances).
"""

from __future__ import annotations

from rest_framework import permissions


class ModelPermissions(permissions.BasePermission):
    """Authenticated, and holding every permission ``view.required_permissions`` names."""

    message = "You do not have the permission this action needs."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        action = getattr(view, "action", None) or request.method.lower()
        needed = getattr(view, "required_permissions", {}).get(action, ())
        return user.has_perms(needed)
