"""``/api/runtimes/``: list, get, add and change runtimes; cordon, uncordon and
decommission them."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from containers import selectors
from containers.api import serializers as s
from containers.api.filters import RuntimeFilter
from containers.api.views.common import _actor
from containers.fleet import runtimes
from containers.fleet.selectors import runtime_decommission_preview
from containers.fleet.services import runtime_cordon, runtime_decommission, runtime_uncordon
from containers.models import Runtime
from core.api.defaults import JSONParser
from core.api.errors import error_responses
from core.api.schema import list_and_retrieve


def _action_reason(request) -> str:
    """The optional ``reason`` of a runtime action's body (400 for anything else)."""
    data = s.RuntimeActionInputSerializer(data=request.data or {})
    data.is_valid(raise_exception=True)
    return data.validated_data["reason"]


@extend_schema_view(
    **list_and_retrieve(
        s.RuntimeOutputSerializer,
        list_summary="List runtimes (permission view_runtime)",
        retrieve_summary="Get a runtime (permission view_runtime)",
    ),
)
class RuntimeViewSet(viewsets.GenericViewSet):
    """The container engines gobrave schedules onto; staff with the runtime permissions
    add them, change how they are reached (``containers.fleet.runtimes``), and cordon,
    uncordon and decommission them (``change_runtime``)."""

    parser_classes = [JSONParser]
    required_permissions = {
        "list": ("containers.view_runtime",),
        "retrieve": ("containers.view_runtime",),
        "cordon": ("containers.change_runtime",),
        "uncordon": ("containers.change_runtime",),
        "decommission": ("containers.change_runtime",),
        "create": ("containers.add_runtime",),
        "partial_update": ("containers.change_runtime",),
    }
    serializer_class = s.RuntimeOutputSerializer
    queryset = Runtime.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = RuntimeFilter

    def get_serializer_class(self):  # the browsable API's forms
        if self.action == "partial_update":
            return s.RuntimeChangeInputSerializer
        return s.RuntimeInputSerializer if self.action == "create" else self.serializer_class

    @extend_schema(
        summary="Add a runtime (permission add_runtime)",
        request=s.RuntimeInputSerializer,
        responses={201: s.RuntimeOutputSerializer, **error_responses(400)},
    )
    def create(self, request):
        data = s.RuntimeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        runtime = runtimes.runtime_create(actor=_actor(request), **data.validated_data)
        return Response(s.RuntimeOutputSerializer(runtime).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a runtime's fields (permission change_runtime)",
        description="Switching it on or off (`enabled`) and changing its capacity "
        "(`max_containers`, `max_concurrency`) are entries in the runtime's history (the "
        "events feed, `source=engine`) with the caller and `reason`.",
        request=s.RuntimeChangeInputSerializer(partial=True),
        responses={200: s.RuntimeOutputSerializer, **error_responses(400, 404)},
    )
    def partial_update(self, request, pk: str):
        runtime = selectors.runtime_by_id(runtime_id=pk)
        data = s.RuntimeChangeInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        reason = fields.pop("reason", "")
        runtime = runtimes.runtime_update(
            runtime_id=runtime.pk, actor=_actor(request), reason=reason, **fields
        )
        return Response(s.RuntimeOutputSerializer(runtime).data)

    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(selectors.runtime_list()))
        return self.get_paginated_response(s.RuntimeOutputSerializer(page, many=True).data)

    def retrieve(self, request, pk: str):
        return Response(s.RuntimeOutputSerializer(selectors.runtime_by_id(runtime_id=pk)).data)

    @extend_schema(
        summary="Cordon: no new placement here (permission change_runtime)",
        description="What runs there keeps running and still starts there; a create whose "
        "only matching runtimes are cordoned is accepted and waits in `pending`, with the "
        "reason, until one is uncordoned. Idempotent. The cordon is an entry in the "
        "runtime's history (the events feed, `source=engine`) with the caller and `reason`.",
        request=s.RuntimeActionInputSerializer,
        responses={200: s.RuntimeOutputSerializer, **error_responses(400, 404)},
    )
    @action(detail=True, methods=["post"])
    def cordon(self, request, pk: str):
        runtime = selectors.runtime_by_id(runtime_id=pk)
        reason = _action_reason(request)
        runtime = runtime_cordon(runtime_id=runtime.pk, actor=_actor(request), reason=reason)
        return Response(s.RuntimeOutputSerializer(runtime).data)

    @extend_schema(
        summary="Uncordon: new placements again (permission change_runtime)",
        description="Idempotent; an entry in the runtime's history with the caller and `reason`.",
        request=s.RuntimeActionInputSerializer,
        responses={200: s.RuntimeOutputSerializer, **error_responses(400, 404)},
    )
    @action(detail=True, methods=["post"])
    def uncordon(self, request, pk: str):
        runtime = selectors.runtime_by_id(runtime_id=pk)
        reason = _action_reason(request)
        runtime = runtime_uncordon(runtime_id=runtime.pk, actor=_actor(request), reason=reason)
        return Response(s.RuntimeOutputSerializer(runtime).data)

    @extend_schema(
        methods=["GET"],
        operation_id="runtimes_decommission_preview",
        summary="What a decommission would forget (permission change_runtime)",
        responses={200: s.DecommissionPreviewSerializer, **error_responses(404)},
    )
    @extend_schema(
        methods=["POST"],
        summary="Decommission an engine gone for good (permission change_runtime)",
        description="Its instances are deleted without any engine call (history kept, "
        'reason "engine decommissioned"), their waiting requests superseded, its DAG runs '
        "failed; the runtime stays, cordoned and disabled, and may then be deleted. "
        "`confirm` must repeat the runtime's name (400 otherwise, nothing changed).",
        request=s.DecommissionInputSerializer,
        responses={200: s.DecommissionResultSerializer, **error_responses(400, 404)},
    )
    @action(detail=True, methods=["get", "post"])
    def decommission(self, request, pk: str):
        runtime = selectors.runtime_by_id(runtime_id=pk)
        if request.method == "GET":
            preview = runtime_decommission_preview(runtime_id=runtime.pk)
            return Response(s.DecommissionPreviewSerializer(preview).data)
        data = s.DecommissionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        if data.validated_data["confirm"] != runtime.name:
            raise ValidationError({"confirm": [f"type the runtime's name ({runtime.name})"]})
        result = runtime_decommission(
            runtime_id=runtime.pk,
            actor=_actor(request),
            reason=data.validated_data["reason"],
        )
        return Response(s.DecommissionResultSerializer(result).data)
