"""The outbox REST API: list and filter rows (``view_outboxevent``), make a backing-off
row due now, dismiss a dead letter and requeue one (``change_outboxevent``)."""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api.defaults import JSONParser
from core.api.errors import error_responses
from core.api.schema import list_and_retrieve
from core.ids import db_id
from outbox import selectors
from outbox.api import serializers as s
from outbox.api.filters import OutboxFilter
from outbox.models import OutboxEvent
from outbox.services import outbox_dead_requeue, outbox_dead_resolve, outbox_retry_now


def _event_id(pk: str) -> int:
    key = db_id(pk)
    if key is None:
        raise exceptions.NotFound(f"No outbox row {pk}.")
    return key


@extend_schema_view(
    **list_and_retrieve(
        s.OutboxEventOutputSerializer,
        list_summary="List outbox rows (permission view_outboxevent)",
        retrieve_summary="Get an outbox row (permission view_outboxevent)",
    ),
)
class OutboxViewSet(viewsets.GenericViewSet):
    """Outbox rows, for diagnosis. Dead rows stay; the remedy is a new request, or a
    requeue (a new row with the dead one's request)."""

    parser_classes = [JSONParser]
    required_permissions = {
        "list": ("outbox.view_outboxevent",),
        "retrieve": ("outbox.view_outboxevent",),
        "retry": ("outbox.change_outboxevent",),
        "dismiss": ("outbox.change_outboxevent",),
        "requeue": ("outbox.change_outboxevent",),
    }
    serializer_class = s.OutboxEventOutputSerializer
    queryset = OutboxEvent.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = OutboxFilter

    def list(self, request):
        rows = self.filter_queryset(selectors.outbox_list())
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(s.OutboxEventOutputSerializer(page, many=True).data)

    def retrieve(self, request, pk: str):
        event = OutboxEvent.objects.filter(id=_event_id(pk)).first()
        if event is None:
            raise exceptions.NotFound(f"No outbox row {pk}.")
        return Response(s.OutboxEventOutputSerializer(event).data)

    @extend_schema(
        summary="Retry now (permission change_outboxevent)",
        description="Make a pending row that waits on backoff due now. Rows in any other "
        "status answer 409.",
        request=None,
        responses={200: s.OutboxEventOutputSerializer, **error_responses(404, 409)},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request, pk: str):
        event = outbox_retry_now(event_id=_event_id(pk))
        return Response(s.OutboxEventOutputSerializer(event).data)

    @extend_schema(
        summary="Dismiss a dead letter (permission change_outboxevent)",
        description="Mark a dead row resolved (`resolved_at`, `resolved_by`): it stays for "
        "diagnosis and is deleted `retention.dead_letters_resolved` later. Its status stays "
        "`dead`. Idempotent; rows in any other status answer 409.",
        request=None,
        responses={200: s.OutboxEventOutputSerializer, **error_responses(404, 409)},
    )
    @action(detail=True, methods=["post"])
    def dismiss(self, request, pk: str):
        event = outbox_dead_resolve(event_id=_event_id(pk), actor=request.user.get_username())
        return Response(s.OutboxEventOutputSerializer(event).data)

    @extend_schema(
        summary="Requeue a dead letter (permission change_outboxevent)",
        description="Run a dead row's request again: a new pending row with its kind, "
        "aggregate and payload, due now (answered, 201). The dead row is resolved "
        "(`resolved_at`, `resolved_by`) and stays `dead` until `retention."
        "dead_letters_resolved`. A dead row runs again at most once: one already resolved "
        "(dismissed or requeued), rows in any other status, or of a kind no handler runs "
        "any more, answer 409.",
        request=None,
        responses={201: s.OutboxEventOutputSerializer, **error_responses(404, 409)},
    )
    @action(detail=True, methods=["post"])
    def requeue(self, request, pk: str):
        event = outbox_dead_requeue(event_id=_event_id(pk), actor=request.user.get_username())
        return Response(s.OutboxEventOutputSerializer(event).data, status=201)
