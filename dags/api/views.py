"""The DAG REST API: templates, runs, cancel and retry failed. Views are thin.

Who may do what follows the containers' rule: a user sees and acts on their own runs;
another user's run answers 404 as a missing one does, unless the caller holds
``view_dagrun`` (then acting on it needs ``change_dagrun``, else 403). A user lists and
starts only the DAG templates whose every container template they may use; writes need
the DAG template permissions.
"""

from __future__ import annotations

from django.db.models import Prefetch
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.reverse import reverse

from containers.actors import user_actor
from core.api.defaults import JSONParser
from core.api.errors import error_responses
from core.api.schema import list_and_retrieve
from dags import selectors, services
from dags.api import serializers as s
from dags.api.filters import DagRunFilter, DagTemplateFilter
from dags.errors import NotFound
from dags.models import DagNodeRun, DagRun, DagTemplate


def _actor(request) -> str:
    return user_actor(request.user)


def _with_nodes(rows):
    return rows.prefetch_related(Prefetch("nodes", queryset=DagNodeRun.objects.order_by("id")))


@extend_schema_view(
    **list_and_retrieve(
        s.DagTemplateOutputSerializer,
        list_summary="List DAG templates you may run",
        retrieve_summary="Get a DAG template",
    ),
    create=extend_schema(
        summary="Create a DAG template (permission add_dagtemplate)",
        request=s.DagTemplateInputSerializer,
        responses={201: s.DagTemplateOutputSerializer, **error_responses(400, 403)},
    ),
    update=extend_schema(
        summary="Replace a DAG template (permission change_dagtemplate)",
        request=s.DagTemplateInputSerializer,
        responses={200: s.DagTemplateOutputSerializer, **error_responses(400, 403, 404)},
    ),
    destroy=extend_schema(
        summary="Delete a DAG template (permission delete_dagtemplate); runs keep theirs",
        responses={204: None, **error_responses(403, 404)},
    ),
)
class DagTemplateViewSet(viewsets.GenericViewSet):
    """DAG templates: graphs of container runs, written by operators."""

    parser_classes = [JSONParser]
    required_permissions = {
        "create": ("dags.add_dagtemplate",),
        "update": ("dags.change_dagtemplate",),
        "destroy": ("dags.delete_dagtemplate",),
    }
    serializer_class = s.DagTemplateOutputSerializer
    queryset = DagTemplate.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = DagTemplateFilter

    def get_serializer_class(self):
        if self.action in ("create", "update"):
            return s.DagTemplateInputSerializer
        return self.serializer_class

    def _visible(self):
        user = self.request.user
        if user.has_perm("dags.view_dagtemplate"):
            return DagTemplate.objects.order_by("name")
        return selectors.dag_template_list(user=user)

    def _get(self, pk: str) -> DagTemplate:
        text = str(pk)
        found = None
        if text.isascii() and text.isdigit() and len(text) <= 18:
            found = self._visible().filter(pk=int(text)).first()
        if found is None:
            raise NotFound(f"no DAG template {text!r}", dag_template=text)
        return found

    def _shown(self, dags, **kwargs):
        """The output serializer of ``dags``, drawn for the caller (secret env hidden)."""
        many = isinstance(dags, list)
        context = {
            "viewer": self.request.user,
            "secret_env": selectors.dag_secret_env(dags if many else [dags]),
        }
        return s.DagTemplateOutputSerializer(dags, many=many, context=context, **kwargs)

    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(self._visible()))
        return self.get_paginated_response(self._shown(list(page)).data)

    def retrieve(self, request, pk: str):
        return Response(self._shown(self._get(pk)).data)

    def create(self, request):
        data = s.DagTemplateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dag = services.dag_template_save(**data.validated_data)
        return Response(self._shown(dag).data, status=status.HTTP_201_CREATED)

    def update(self, request, pk: str):
        dag = self._get(pk)
        data = s.DagTemplateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        dag = services.dag_template_save(dag=dag, **data.validated_data)
        return Response(self._shown(dag).data)

    def destroy(self, request, pk: str):
        services.dag_template_delete(dag=self._get(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


_RUN_ACTION = {202: s.DagRunDetailSerializer, **error_responses(403, 404, 409)}


@extend_schema_view(
    **list_and_retrieve(
        s.DagRunOutputSerializer,
        list_summary="List DAG runs",
        retrieve_summary="Get a DAG run with its nodes",
        detail=s.DagRunDetailSerializer,
    ),
    create=extend_schema(
        summary="Start a run of a DAG template",
        request=s.DagRunCreateInputSerializer,
        responses={202: s.DagRunDetailSerializer, **error_responses(400)},
    ),
)
class DagRunViewSet(viewsets.GenericViewSet):
    """DAG runs: start, list, watch, cancel, retry what failed."""

    parser_classes = [JSONParser]
    serializer_class = s.DagRunOutputSerializer
    queryset = DagRun.objects.none()
    filter_backends = [DjangoFilterBackend]
    filterset_class = DagRunFilter

    def get_serializer_class(self):
        return s.DagRunCreateInputSerializer if self.action == "create" else self.serializer_class

    def _run(self, pk: str) -> DagRun:
        run = selectors.dag_run_get(run_id=pk, user=self.request.user)
        return _with_nodes(DagRun.objects.select_related("owner", "runtime")).get(pk=run.pk)

    def _viewer(self) -> dict:
        """Serializer context: reasons and messages render for the caller (no host paths)."""
        return {"viewer": self.request.user}

    def _operable(self, pk: str) -> DagRun:
        run = self._run(pk)
        user = self.request.user
        if run.owner_id != user.pk and not user.has_perm("dags.change_dagrun"):
            raise PermissionDenied("Acting on another user's run needs the change permission.")
        return run

    def _detail(self, run: DagRun, code: int = 200, **headers) -> Response:
        run = _with_nodes(DagRun.objects.select_related("owner", "runtime")).get(pk=run.pk)
        return Response(
            s.DagRunDetailSerializer(run, context=self._viewer()).data, status=code, headers=headers
        )

    def list(self, request):
        rows = self.filter_queryset(selectors.dag_run_list(user=request.user))
        page = self.paginate_queryset(_with_nodes(rows))
        return self.get_paginated_response(
            s.DagRunOutputSerializer(page, many=True, context=self._viewer()).data
        )

    def retrieve(self, request, pk: str):
        return Response(s.DagRunDetailSerializer(self._run(pk), context=self._viewer()).data)

    def create(self, request):
        data = s.DagRunCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        ref = data.validated_data["template"]
        try:
            dag = selectors.dag_template_get(ref=ref, user=request.user)
        except NotFound:
            raise ValidationError(
                {"template": [f"no DAG template {ref!r} that you may run"]}
            ) from None
        run = services.dag_run_start(dag=dag, owner=request.user, actor=_actor(request))
        location = reverse("dag-run-detail", kwargs={"pk": run.pk}, request=request)
        return self._detail(run, status.HTTP_202_ACCEPTED, Location=location)

    @extend_schema(summary="Cancel a run", request=None, responses=_RUN_ACTION)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk: str):
        run = self._operable(pk)
        return self._detail(
            services.dag_run_cancel(run_id=run.pk, actor=_actor(request)), status.HTTP_202_ACCEPTED
        )

    @extend_schema(
        summary="Re-run the failed and skipped nodes of a failed run",
        request=None,
        responses=_RUN_ACTION,
    )
    @action(detail=True, methods=["post"], url_path="retry-failed")
    def retry_failed(self, request, pk: str):
        run = self._operable(pk)
        return self._detail(
            services.dag_run_retry_failed(run_id=run.pk, actor=_actor(request)),
            status.HTTP_202_ACCEPTED,
        )

    @extend_schema(
        summary="The run's history, newest first",
        responses={200: s.DagEventOutputSerializer(many=True), **error_responses(400, 404)},
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk: str):
        # The run only for its id and the caller's right to see it: not its nodes.
        rows = selectors.run_events(selectors.dag_run_get(run_id=pk, user=request.user))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(
            s.DagEventOutputSerializer(page, many=True, context=self._viewer()).data
        )
