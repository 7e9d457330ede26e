"""``GET /api/events/``: the audit trail of instances, DAG runs and engines, as one feed."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from core.api.errors import error_responses
from core.ids import db_id
from events.api import serializers as s
from events.selectors import Filters, Position, events_page

DESCRIPTION = """Every history entry of instances (requests, transitions, engine events,
policy actions, engine decommissions, orphans), of DAG runs and of engines (`source`
`engine`: unreachable, reachable again, cordoned, uncordoned, decommissioned, enabled,
disabled, capacity changed; with `actor` and the reason in `message`), oldest first: in
the order of the transactions that wrote them (then by source and id). A user reads the
entries of their own instances and runs, deleted ones included; `view_containerinstance`
(`view_dagrun`) shows everyone's. Engines' entries belong to no owner: only callers with
`view_runtime` (who see the engines) get them, and an `owner`, `instance` or `dag_run`
filter leaves them out.

**Paging, and what it guarantees.** Each page ends with `cursor`, the position after its
last entry, and `next` (a link with that cursor) when more entries were ready at once.
A reader that follows its cursor, now or later, receives every entry once and in the
same order, also an entry whose transaction committed after a later-numbered one, and
whatever is written while it reads: a page serves only entries of transactions that had
all ended when it was read (those older than the oldest transaction still running), and
every entry written later sorts after them. So an entry appears in the feed once its
transaction and every older one have ended (usually within milliseconds). Entries a
retention purge deleted before the reader reached them are not served. No count, no
offset; filters keep to the cursor's order."""


def _owner_ids(value: str) -> list[int]:
    """The ids of the users named ``value`` or with ``value`` as their id."""
    query = Q(username=value)
    key = db_id(value)
    if key is not None:
        query |= Q(pk=key)
    return list(get_user_model().objects.filter(query).values_list("pk", flat=True))


class EventsView(APIView):
    """The feed (``events.selectors``): filters, the reader's scope, the cursor."""

    @extend_schema(
        summary="The events feed (audit trail)",
        description=DESCRIPTION,
        parameters=[s.EventsQuerySerializer],
        responses={200: s.EventsPageSerializer, **error_responses(400)},
    )
    def get(self, request):
        query = s.EventsQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        given = query.validated_data
        filters = Filters(
            instance=given.get("instance"),
            dag_run=given.get("dag_run"),
            owner_ids=_owner_ids(given["owner"]) if "owner" in given else None,
            kind=given.get("kind", ""),
            actor=given.get("actor", ""),
            created_after=given.get("created_after"),
            created_before=given.get("created_before"),
            source=given.get("source", ""),
        )
        page = events_page(
            user=request.user,
            filters=filters,
            after=given.get("cursor", Position()),
            limit=given.get("limit", 50),
        )
        cursor = s.cursor_encode(page.position)
        following = None
        if page.more:
            following = replace_query_param(request.build_absolute_uri(), "cursor", cursor)
        return Response(
            {
                "next": following,
                "cursor": cursor,
                "results": [s.entry_data(entry, viewer=request.user) for entry in page.entries],
            }
        )
