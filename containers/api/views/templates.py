"""``/api/templates/``: users read the templates they may use; writes need the
template permissions."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.response import Response

from containers import selectors
from containers.api import serializers as s
from containers.api.filters import TemplateFilter
from containers.api.views.common import _viewer
from containers.models import ContainerTemplate
from containers.spec import template_services
from core.api.defaults import JSONParser
from core.api.errors import error_responses
from core.api.schema import list_and_retrieve


@extend_schema_view(
    **list_and_retrieve(
        s.TemplateOutputSerializer,
        list_summary="List templates",
        retrieve_summary="Get a template",
    ),
    create=extend_schema(
        summary="Create a template (permission add_containertemplate)",
        request=s.TemplateInputSerializer,
        responses={201: s.TemplateOutputSerializer, **error_responses(400)},
    ),
    update=extend_schema(
        summary="Replace a template (permission change_containertemplate)",
        request=s.TemplateInputSerializer,
        responses={200: s.TemplateOutputSerializer, **error_responses(400, 404)},
    ),
    partial_update=extend_schema(
        summary="Change a template (permission change_containertemplate)",
        request=s.TemplateInputSerializer(partial=True),
        responses={200: s.TemplateOutputSerializer, **error_responses(400, 404)},
    ),
    destroy=extend_schema(
        summary="Delete a template no instance uses (permission delete_containertemplate)",
        responses={204: None, **error_responses(404, 409)},
    ),
)
class TemplateViewSet(viewsets.GenericViewSet):
    """Templates: users read those they may use; writes need the template permissions."""

    parser_classes = [JSONParser]
    required_permissions = {
        "create": ("containers.add_containertemplate",),
        "update": ("containers.change_containertemplate",),
        "partial_update": ("containers.change_containertemplate",),
        "destroy": ("containers.delete_containertemplate",),
    }
    serializer_class = s.TemplateOutputSerializer
    queryset = ContainerTemplate.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = TemplateFilter

    def get_serializer_class(self):  # the browsable API's forms
        writes = {"create", "update", "partial_update"}
        return s.TemplateInputSerializer if self.action in writes else self.serializer_class

    def list(self, request):
        rows = self.filter_queryset(selectors.template_list(user=request.user))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(
            s.TemplateOutputSerializer(page, many=True, context=_viewer(request)).data
        )

    def retrieve(self, request, pk: str):
        template = selectors.template_by_id(template_id=pk, user=request.user)
        return Response(s.TemplateOutputSerializer(template, context=_viewer(request)).data)

    def create(self, request):
        data = s.TemplateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        template = template_services.template_create(**data.validated_data)
        return Response(
            s.TemplateOutputSerializer(template, context=_viewer(request)).data,
            status=status.HTTP_201_CREATED,
        )

    def _update(self, request, pk: str, *, partial: bool) -> Response:
        template = selectors.template_by_id(template_id=pk, user=request.user)
        data = s.TemplateInputSerializer(data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        template = template_services.template_update(template_id=template.pk, **data.validated_data)
        return Response(s.TemplateOutputSerializer(template, context=_viewer(request)).data)

    def update(self, request, pk: str):
        return self._update(request, pk, partial=False)

    def partial_update(self, request, pk: str):
        return self._update(request, pk, partial=True)

    def destroy(self, request, pk: str):
        template = selectors.template_by_id(template_id=pk, user=request.user)
        template_services.template_delete(template_id=template.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
