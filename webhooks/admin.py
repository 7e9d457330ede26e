"""Webhook endpoints in the admin: subscribe, change, enable, disable, rotate a secret.

Every write goes through ``webhooks.services``. A secret is shown once, in the message
that follows its creation or rotation; no form or page holds it (``secrets`` is not
editable, and not listed here).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from core.admin_helpers import badge
from core.errors import DomainError
from webhooks import services
from webhooks.addresses import endpoint_url_check
from webhooks.kinds import EventKind
from webhooks.models import WebhookEndpoint
from webhooks.selectors import live_secrets
from webhooks.services import check_kinds


class EndpointForm(forms.ModelForm):
    event_kinds = forms.MultipleChoiceField(
        choices=[(k.value, k.value) for k in EventKind], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("url", "event_kinds", "owner", "description")

    def clean(self):
        """The service's checks (the URL's form and resolved addresses, the kinds the
        owner may receive) as form errors: a refused endpoint is shown, nothing saved."""
        cleaned = super().clean()
        owner = cleaned.get("owner") if self.instance.pk is None else self.instance.owner
        try:
            if cleaned.get("url"):
                endpoint_url_check(cleaned["url"])
            if cleaned.get("event_kinds"):
                check_kinds(cleaned["event_kinds"], operator=owner is None)
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from None
        return cleaned


def _secret_message(request, endpoint: WebhookEndpoint, secret: str, what: str) -> None:
    messages.warning(
        request,
        f"Endpoint #{endpoint.pk}: {what}. Its signing secret, shown this once only: {secret}",
    )


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Endpoints with their state; a disabled one shows why."""

    form = EndpointForm
    list_display = ("id", "url", "owner", "kinds", "state", "failure_streak", "signing")
    list_filter = ("enabled",)
    list_select_related = ("owner",)
    search_fields = ("url", "owner__username", "description")
    readonly_fields = ("enabled", "disabled_reason", "failure_streak", "signing", "created_at")
    actions = ("enable", "disable", "rotate_secret")

    @admin.display(description="event kinds")
    def kinds(self, endpoint: WebhookEndpoint) -> str:
        return ", ".join(endpoint.event_kinds)

    @admin.display(description="state")
    def state(self, endpoint: WebhookEndpoint):
        if endpoint.enabled:
            return badge("enabled", "#198754")
        return badge("disabled", "#dc3545", title=endpoint.disabled_reason)

    @admin.display(description="secrets signing")
    def signing(self, endpoint: WebhookEndpoint) -> int:
        return len(live_secrets(endpoint))

    def save_model(self, request, obj, form, change) -> None:
        """Through the services (the form checked what they check)."""
        data = form.cleaned_data
        if change:
            services.webhook_endpoint_update(
                endpoint_id=obj.pk,
                url=data["url"],
                event_kinds=data["event_kinds"],
                description=data.get("description", ""),
            )
            return
        made = services.webhook_endpoint_create(
            url=data["url"],
            event_kinds=data["event_kinds"],
            owner=data.get("owner"),
            description=data.get("description", ""),
        )
        obj.pk = made.endpoint.pk
        _secret_message(request, made.endpoint, made.secret, "subscribed")

    def get_readonly_fields(self, request, obj=None):
        # An endpoint's owner is who may see its events: set once, at creation.
        return (*self.readonly_fields, "owner") if obj else self.readonly_fields

    @admin.action(description="Enable the selected endpoints", permissions=["change"])
    def enable(self, request, queryset) -> None:
        for pk in queryset.values_list("pk", flat=True):
            services.webhook_endpoint_enable(endpoint_id=pk)
        messages.success(request, "Enabled.")

    @admin.action(description="Disable the selected endpoints", permissions=["change"])
    def disable(self, request, queryset) -> None:
        reason = f"disabled by {request.user.get_username()} in the admin"
        for pk in queryset.values_list("pk", flat=True):
            services.webhook_endpoint_disable(endpoint_id=pk, reason=reason)
        messages.success(request, "Disabled.")

    @admin.action(description="Rotate the signing secret", permissions=["change"])
    def rotate_secret(self, request, queryset) -> None:
        for pk in queryset.values_list("pk", flat=True):
            made = services.webhook_endpoint_rotate(endpoint_id=pk)
            _secret_message(request, made.endpoint, made.secret, "secret rotated")
