"""Quota overrides per user and per group (operators edit them; contract §8), and the admin's
lock-down: django-q2's pages unregistered, API tokens for superusers only."""

from __future__ import annotations

from django.contrib import admin
from django_q.models import Failure, OrmQ, Schedule, Success
from rest_framework.authtoken.admin import TokenAdmin as DRFTokenAdmin
from rest_framework.authtoken.models import TokenProxy

from tenants.models import GroupQuota, UserQuota


@admin.register(UserQuota)
class UserQuotaAdmin(admin.ModelAdmin):
    list_display = ("user", "max_pending_per_owner", "max_instances_per_owner", "updated_at")
    search_fields = ("user__username",)
    list_select_related = ("user",)
    raw_id_fields = ("user",)


@admin.register(GroupQuota)
class GroupQuotaAdmin(admin.ModelAdmin):
    list_display = ("group", "max_pending_per_owner", "max_instances_per_owner", "updated_at")
    search_fields = ("group__name",)
    list_select_related = ("group",)


# --- lock-down: what nobody needs, and what only superusers may see -------------------------


def _unregister(*models) -> None:
    for model in models:
        if admin.site.is_registered(model):
            admin.site.unregister(model)


# django-q2's pages: gobrave schedules nothing (its cluster's scheduler is off), and anyone
# who may add a Schedule there can run any function inside the workers.
_unregister(Schedule, Success, Failure, OrmQ)


_unregister(TokenProxy)


@admin.register(TokenProxy)
class TokenAdmin(DRFTokenAdmin):
    """API tokens are passwords: only superusers see or manage them, whatever permissions
    a staff account holds."""

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser
