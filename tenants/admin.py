"""Quota overrides per user and per group (operators edit them; contract §8), and the admin's
lock-down: django-q2's pages unregistered, API tokens seen and revoked by superusers only."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django_q.models import Failure, OrmQ, Schedule, Success
from knox.models import AuthToken as KnoxAuthToken

from core.admin_lists import FlatChangelistMixin
from tenants import services
from tenants.models import ApiToken, GroupQuota, UserQuota


class UsernameField(forms.ModelChoiceField):
    """A user typed by username; an unknown name is a form error that repeats it.

    A text box rather than autocomplete: operators edit quotas without the right to browse
    the users' admin, which autocomplete would need."""

    widget = forms.TextInput

    def __init__(self, **kwargs) -> None:
        super().__init__(
            queryset=get_user_model().objects.all(),
            to_field_name="username",
            error_messages={"invalid_choice": "No user is named \u201c%(value)s\u201d."},
            **kwargs,
        )


class UserQuotaForm(forms.ModelForm):
    user = UsernameField(help_text="The user's username, e.g. alice.")

    class Meta:
        model = UserQuota
        fields = ["user", "max_pending_per_owner", "max_instances_per_owner"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["user"] = self.instance.user.username


@admin.register(UserQuota)
class UserQuotaAdmin(admin.ModelAdmin):
    form = UserQuotaForm
    list_display = ("user", "max_pending_per_owner", "max_instances_per_owner", "updated_at")
    search_fields = ("user__username",)
    list_select_related = ("user",)


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


# knox registers its own model, which gobrave swaps for ``ApiToken`` (``KNOX_TOKEN_MODEL``).
_unregister(KnoxAuthToken)


@admin.register(ApiToken)
class ApiTokenAdmin(FlatChangelistMixin, admin.ModelAdmin):
    """Users' API tokens: superusers see them (never the key: only its digest is stored)
    and revoke them, whatever permissions a staff account holds. Nobody adds one here: a
    user makes their own (the key is shown to them once), an operator runs
    ``manage.py api_token_create``."""

    list_display = ("name", "user", "token_key", "created", "expiry", "last_used")
    list_select_related = ("user",)
    search_fields = ("name", "token_key", "user__username")
    fields = ("name", "user", "token_key", "created", "expiry", "last_used")
    readonly_fields = fields

    def _superuser(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_module_permission(self, request) -> bool:
        return self._superuser(request)

    def has_view_permission(self, request, obj=None) -> bool:
        return self._superuser(request)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._superuser(request)

    def delete_model(self, request, obj) -> None:
        services.api_token_revoke(user=obj.user, token_id=obj.pk)

    def delete_queryset(self, request, queryset) -> None:
        for token in queryset.select_related("user"):
            services.api_token_revoke(user=token.user, token_id=token.pk)
