"""``/api/containers/``: list, get, create, start, stop, delete, extend, an
instance's history and its logs (the last lines, or followed as a stream)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import docker.errors
from asgiref.sync import async_to_sync
from django.conf import settings
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.reverse import reverse

from containers import access, live, selectors
from containers.api import serializers as s
from containers.api.filters import InstanceFilter
from containers.api.views.common import _actor, _viewer
from containers.engines import calls
from containers.engines.base import EngineError
from containers.errors import EngineUnavailable, NotFound, TemplateUnavailable
from containers.models import ContainerInstance
from containers.requests.extensions import container_extend
from containers.requests.services import (
    RequestResult,
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from containers.spec import redaction
from core.api.defaults import JSONParser
from core.api.errors import RETRY_AFTER, error_responses
from core.api.schema import list_and_retrieve
from streams.responses import open_stream

log = logging.getLogger(__name__)


def _accepted(request, result: RequestResult, **headers: str) -> Response:
    return Response(
        s.InstanceAcceptedSerializer(result, context=_viewer(request)).data,
        status=status.HTTP_202_ACCEPTED,
        headers=headers,
    )


_ACTION_RESPONSES = {
    202: s.InstanceAcceptedSerializer,
    **error_responses(403, 404, 409),
}


@extend_schema_view(
    **list_and_retrieve(
        s.InstanceOutputSerializer,
        list_summary="List container instances",
        retrieve_summary="Get a container instance",
    ),
    create=extend_schema(
        summary="Request a new instance from a template",
        description="Accepted requests are queued (status `pending`); a full queue "
        "(`queue_full`) or the owner's pending quota (`owner_quota`) answers 429 with "
        "`Retry-After`; the owner's instance quota (`quota_exceeded`, only a delete makes "
        "room) answers 409 without.",
        request=s.InstanceCreateInputSerializer,
        parameters=[RETRY_AFTER],
        responses={202: s.InstanceAcceptedSerializer, **error_responses(400, 409, 429)},
        examples=[
            OpenApiExample("by name", value={"template": "sleeper"}, request_only=True),
            OpenApiExample(
                "with overrides",
                value={"template": "sleeper", "name": "my-box", "env": {"MODE": "debug"}},
                request_only=True,
            ),
        ],
    ),
    destroy=extend_schema(
        summary="Request deletion",
        description="202 also when a delete is already under way (a no-op, `queued` false).",
        responses=_ACTION_RESPONSES,
    ),
)
class ContainerViewSet(viewsets.GenericViewSet):
    """Container instances: list, get, create, start, stop, delete, history and logs."""

    parser_classes = [JSONParser]
    throttle_creates = True  # POST here is a create (core.api.throttles.CreateThrottle)
    serializer_class = s.InstanceOutputSerializer
    queryset = ContainerInstance.objects.none()  # the schema's path type; rows come below
    filter_backends = [DjangoFilterBackend]
    filterset_class = InstanceFilter

    def get_serializer_class(self):  # the browsable API's forms
        return s.InstanceCreateInputSerializer if self.action == "create" else self.serializer_class

    def _instance(self, pk: str) -> ContainerInstance:
        return selectors.instance_get(instance_id=pk, user=self.request.user)

    def _operable(self, pk: str) -> ContainerInstance:
        """An instance the caller may act on: 404 if they cannot see it, 403 if only see it."""
        instance = self._instance(pk)
        if not access.may_operate(self.request.user, instance):
            raise PermissionDenied("Acting on another user's instance needs the change permission.")
        return instance

    def list(self, request):
        rows = self.filter_queryset(selectors.instance_list(user=request.user))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(
            s.InstanceOutputSerializer(page, many=True, context=_viewer(request)).data
        )

    def retrieve(self, request, pk: str):
        return Response(
            s.InstanceOutputSerializer(self._instance(pk), context=_viewer(request)).data
        )

    def create(self, request):
        data = s.InstanceCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        ref = data.validated_data["template"]
        try:
            template = selectors.template_get(ref=ref, user=request.user)
            instance = container_create_by_template(
                template=template,
                owner=request.user,
                actor=_actor(request),
                name=data.validated_data.get("name"),
                env=data.validated_data.get("env"),
            )
        except (NotFound, TemplateUnavailable):
            # Switched off or not open to this user: answered as if it did not exist.
            message = f"no template {ref!r} that you may use"
            raise ValidationError({"template": [message]}) from None
        location = reverse("container-detail", kwargs={"pk": instance.id}, request=request)
        return _accepted(request, RequestResult(instance=instance, queued=True), Location=location)

    def _request(self, request, pk: str, service: Callable[..., RequestResult]) -> Response:
        """Ask ``service`` (start, stop, delete) for an instance the caller may act on: 202."""
        instance = self._operable(pk)
        return _accepted(request, service(instance_id=instance.id, actor=_actor(request)))

    def destroy(self, request, pk: str):
        return self._request(request, pk, container_delete)

    @extend_schema(
        summary="Request a start",
        description="202 also while a start is already under way (a no-op, `queued` false).",
        request=None,
        responses=_ACTION_RESPONSES,
    )
    @action(detail=True, methods=["post"])
    def start(self, request, pk: str):
        return self._request(request, pk, container_start)

    @extend_schema(
        summary="Request a stop",
        description="202 also when stopping, stopped or failed (a no-op, `queued` false). "
        "A start that still waits (`start_pending`) is cancelled: its container stays, or "
        "ends, stopped.",
        request=None,
        responses=_ACTION_RESPONSES,
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, pk: str):
        return self._request(request, pk, container_stop)

    @extend_schema(
        summary="Push back the instance's time limit",
        description="Moves `policy.stop_at` (the max_lifetime stop) later by `seconds`, where "
        "the template lets the caller (`extendable_by`) and within its `extend_max` per run; "
        "403 `extension_not_allowed`, 409 `extension_refused` (no time limit running, or "
        "not that much left) otherwise, nothing changed.",
        request=s.ExtendInputSerializer,
        responses={200: s.InstanceOutputSerializer, **error_responses(400, 403, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def extend(self, request, pk: str):
        data = s.ExtendInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        instance = self._operable(pk)  # a viewer who may only look may not extend
        instance = container_extend(
            instance_id=instance.id,
            user=request.user,
            seconds=data.validated_data["seconds"],
            actor=_actor(request),
        )
        return Response(s.InstanceOutputSerializer(instance, context=_viewer(request)).data)

    @extend_schema(
        summary="The instance's history, newest first",
        responses={200: s.EventOutputSerializer(many=True), **error_responses(400, 404)},
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk: str):
        rows = selectors.instance_events(instance=self._instance(pk))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(
            s.EventOutputSerializer(page, many=True, context=_viewer(request)).data
        )

    @extend_schema(
        summary="The last lines of the container's output, or a stream of it (follow)",
        parameters=[s.LogsQuerySerializer],
        responses={
            (200, "application/json"): s.LogsOutputSerializer,
            (200, "text/plain"): OpenApiTypes.STR,
            **error_responses(400, 404, 429, 503),
        },
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk: str):
        query = s.LogsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        instance = self._instance(pk)
        tail = query.validated_data["tail"]
        try:
            if query.validated_data["follow"]:
                return self._follow(request, instance, tail, query.validated_data.get("seconds"))
            logs = calls.container_logs(instance=instance, tail=tail)
            text = redaction.logs_for(request.user, instance.spec, logs.text)
        except (EngineError, docker.errors.DockerException, OSError) as exc:
            raise _unavailable(instance, exc) from None
        response = Response(
            s.LogsOutputSerializer({"id": instance.id, "tail": tail, "logs": text}).data
        )
        if logs.cut_at is not None:  # cut at calls.LOG_MAX_BYTES: say where
            response[calls.LOG_CUT_HEADER] = str(logs.cut_at)
        return response

    def _follow(self, request, instance, tail: int, seconds: int | None):
        """The output as it comes, as a stream of the ``streams`` app: no thread and no
        database connection held while it waits; 429 over the stream limits, 503 when
        the engine does not answer (both before anything is sent)."""
        # The stream's guard ends it at its time limit and says so; the engine's follow
        # has no earlier bound of its own.
        bound = settings.GOBRAVE["streams"]["max_seconds"] + live.FOLLOW_MARGIN_SECONDS
        try:
            stream = live.output_follow_open(instance=instance, tail=tail, seconds=bound)
        except (EngineError, docker.errors.DockerException, OSError) as exc:
            raise _unavailable(instance, exc) from None
        sees, spec = redaction.sees_secrets(request.user), instance.spec
        try:
            return open_stream(
                request,
                lambda: live.output_text(stream, sees_secrets=sees, spec=spec),
                allowed=live.watch_rule(instance.id),
                sse=False,
                seconds=seconds,
            )
        except BaseException:
            async_to_sync(stream.aclose)()
            raise


def _unavailable(instance, exc) -> EngineUnavailable:
    # requests' errors are OSErrors; the engine may be down or unreachable.
    log.warning("logs of instance %s: runtime %s: %s", instance.id, instance.runtime, exc)
    name = instance.runtime.name if instance.runtime else "(none)"
    return EngineUnavailable(f"the runtime {name} did not answer: {exc}", runtime=name)
