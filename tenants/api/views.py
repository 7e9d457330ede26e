"""``/api/tokens/``: a user's own API tokens, made, listed and revoked."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.response import Response

from core.api.defaults import JSONParser
from core.api.errors import error_responses
from tenants import selectors, services
from tenants.api import serializers as s
from tenants.models import ApiToken


@extend_schema_view(
    list=extend_schema(
        summary="List your API tokens (never their keys)",
        responses={200: s.TokenOutputSerializer(many=True), **error_responses(400)},
    ),
    create=extend_schema(
        summary="Make yourself an API token: its key is in this answer only",
        request=s.TokenInputSerializer,
        responses={201: s.TokenCreatedSerializer, **error_responses(400)},
    ),
    destroy=extend_schema(
        summary="Revoke one of your API tokens",
        responses={204: None, **error_responses(404)},
    ),
)
class TokenViewSet(viewsets.GenericViewSet):
    """Every logged-in user manages their own tokens and nobody else's (another user's
    token answers 404, as a missing one)."""

    parser_classes = [JSONParser]
    serializer_class = s.TokenOutputSerializer
    queryset = ApiToken.objects.none()
    lookup_value_regex = r"[0-9]{1,18}"  # else Django's 404 (a bigint id, never a 500)

    def get_serializer_class(self):  # the browsable API's form
        return s.TokenInputSerializer if self.action == "create" else self.serializer_class

    def list(self, request):
        page = self.paginate_queryset(selectors.api_tokens_of(user=request.user))
        return self.get_paginated_response(s.TokenOutputSerializer(page, many=True).data)

    def create(self, request):
        data = s.TokenInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = services.api_token_create(user=request.user, **data.validated_data)
        body = s.TokenCreatedSerializer(created.token, context={"key": created.key}).data
        response = Response(body, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"  # the key: no cache keeps this answer
        return response

    def destroy(self, request, pk: str):
        services.api_token_revoke(user=request.user, token_id=int(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)
