"""Quota overrides per user and per group (operators edit them; SPEC 8)."""

from __future__ import annotations

from django.contrib import admin

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
