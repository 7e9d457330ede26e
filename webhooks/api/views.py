"""``/api/webhooks/``: operators manage every endpoint (their own are operator-wide);
users manage endpoints for their own instances when ``webhooks.users_may_subscribe``."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.defaults import JSONParser
from core.api.errors import error_responses
from core.api.schema import list_and_retrieve
from core.ids import db_id
from webhooks import selectors, services
from webhooks.api import serializers as s
from webhooks.errors import WebhookNotFound, WebhooksNotAllowed
from webhooks.models import WebhookEndpoint

ADD_ALL = "webhooks.add_webhookendpoint"


def _with_secret(created: services.WithSecret) -> dict:
    data = s.EndpointOutputSerializer(created.endpoint).data
    return {**data, "secret": created.secret}


def _users_may_subscribe() -> bool:
    return settings.GOBRAVE["webhooks"]["users_may_subscribe"]


@extend_schema_view(
    **list_and_retrieve(
        s.EndpointOutputSerializer,
        list_summary="List webhook endpoints (all with view_webhookendpoint, else one's own)",
        retrieve_summary="Get a webhook endpoint",
    ),
    create=extend_schema(
        summary="Subscribe an endpoint (operators: operator-wide; users: their own "
        "instances' events, when webhooks.users_may_subscribe)",
        description="The answer holds the signing secret, shown this once only.",
        request=s.EndpointInputSerializer,
        responses={201: s.EndpointWithSecretSerializer, **error_responses(400, 403)},
    ),
    partial_update=extend_schema(
        summary="Change an endpoint's URL, event kinds or description",
        request=s.EndpointInputSerializer(partial=True),
        responses={200: s.EndpointOutputSerializer, **error_responses(400, 403, 404)},
    ),
    destroy=extend_schema(
        summary="Delete an endpoint (its waiting deliveries finish unsent)",
        responses={204: None, **error_responses(403, 404)},
    ),
)
class WebhookViewSet(viewsets.GenericViewSet):
    """Webhook endpoints. Secrets are answered once (creation, rotation), never listed."""

    parser_classes = [JSONParser]
    serializer_class = s.EndpointOutputSerializer
    queryset = WebhookEndpoint.objects.none()

    def get_serializer_class(self):  # the browsable API's forms
        if self.action in ("create", "partial_update"):
            return s.EndpointInputSerializer
        return self.serializer_class

    def _mine(self, request, pk: str) -> WebhookEndpoint:
        """The endpoint ``pk`` if the caller may change it; 404 if they may not see it,
        403 if they may see it but not change it (or users may not subscribe)."""
        key = db_id(pk)
        visible = selectors.webhook_endpoints_visible(user=request.user)
        if key is None or not visible.filter(pk=key).exists():
            raise WebhookNotFound(f"no webhook endpoint {pk}", id=str(pk)[:40])
        endpoint = selectors.webhook_endpoint_manageable(user=request.user, endpoint_id=key)
        operator = request.user.has_perm(selectors.MANAGE_ALL)
        if endpoint is None or not (operator or _users_may_subscribe()):
            raise WebhooksNotAllowed("you may not change this webhook endpoint")
        return endpoint

    def list(self, request):
        rows = selectors.webhook_endpoints_visible(user=request.user)
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(s.EndpointOutputSerializer(page, many=True).data)

    def retrieve(self, request, pk: str):
        key = db_id(pk)
        endpoint = (
            selectors.webhook_endpoints_visible(user=request.user).filter(pk=key).first()
            if key is not None
            else None
        )
        if endpoint is None:
            raise WebhookNotFound(f"no webhook endpoint {pk}", id=str(pk)[:40])
        return Response(s.EndpointOutputSerializer(endpoint).data)

    def create(self, request):
        operator = request.user.has_perm(ADD_ALL)
        if not operator and not _users_may_subscribe():
            raise WebhooksNotAllowed(
                "users may not subscribe webhooks here (webhooks.users_may_subscribe is off)"
            )
        data = s.EndpointInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = services.webhook_endpoint_create(
            owner=None if operator else request.user, **data.validated_data
        )
        return Response(_with_secret(created), status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk: str):
        endpoint = self._mine(request, pk)
        data = s.EndpointInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        endpoint = services.webhook_endpoint_update(endpoint_id=endpoint.pk, **data.validated_data)
        return Response(s.EndpointOutputSerializer(endpoint).data)

    def destroy(self, request, pk: str):
        endpoint = self._mine(request, pk)
        services.webhook_endpoint_delete(endpoint_id=endpoint.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Rotate the signing secret",
        description="A new secret, in this answer only; the old one keeps signing too "
        "for webhooks.rotation_overlap, so receivers switch without missing a delivery.",
        request=None,
        responses={200: s.EndpointWithSecretSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk: str):
        endpoint = self._mine(request, pk)
        return Response(_with_secret(services.webhook_endpoint_rotate(endpoint_id=endpoint.pk)))

    @extend_schema(
        summary="Enable an endpoint again (clears its reason and failure streak)",
        request=None,
        responses={200: s.EndpointOutputSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["post"])
    def enable(self, request, pk: str):
        endpoint = self._mine(request, pk)
        endpoint = services.webhook_endpoint_enable(endpoint_id=endpoint.pk)
        return Response(s.EndpointOutputSerializer(endpoint).data)

    @extend_schema(
        summary="Disable an endpoint",
        request=s.DisableInputSerializer,
        responses={200: s.EndpointOutputSerializer, **error_responses(400, 403, 404)},
    )
    @action(detail=True, methods=["post"])
    def disable(self, request, pk: str):
        endpoint = self._mine(request, pk)
        data = s.DisableInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reason = data.validated_data.get("reason") or f"disabled by {request.user.get_username()}"
        endpoint = services.webhook_endpoint_disable(endpoint_id=endpoint.pk, reason=reason)
        return Response(s.EndpointOutputSerializer(endpoint).data)
