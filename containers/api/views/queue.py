"""``/api/queue/``: the create queue's and the relay's statistics."""

from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from containers import access, selectors
from containers.api import serializers as s
from core.api.errors import error_responses


class QueueView(APIView):
    """The create queue and the relay (counters over the last hour, see ``queue_stats``):
    the installation's for callers who see every instance, else the caller's own."""

    @extend_schema(
        summary="Queue statistics: yours, or the installation's (view_containerinstance)",
        responses={
            200: PolymorphicProxySerializer(
                component_name="Queue",
                serializers={
                    "installation": s.QueueOutputSerializer,
                    "owner": s.OwnerQueueOutputSerializer,
                },
                resource_type_field_name="scope",
            ),
            **error_responses(),
        },
    )
    def get(self, request):
        if access.sees_all_instances(request.user):
            return Response(s.QueueOutputSerializer(selectors.queue_stats()).data)
        stats = selectors.queue_stats(owner=request.user)
        return Response(s.OwnerQueueOutputSerializer(stats).data)
