"""The console's own views: the queue dashboard and the instances' live updates.

The dashboard is ``/admin/containers/containerinstance/dashboard/``; ``live/`` beside it
answers the JSON that ``containers/static/containers/live.js`` polls to refresh the
instance list in place. The instance page and the dashboard are kept current by
server-sent events instead (``<id>/stream/``, ``dashboard/stream/``: the ``streams`` app),
which hold no thread while they wait.

Numbers come from ``selectors.dashboard_stats()``; this module only shapes them for the
page (the chart's bar heights) and renders. ``?fragment=1`` returns the body alone, which
the page fetches every few seconds to refresh itself.
"""

from __future__ import annotations

import uuid

import docker.errors
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse

from containers import live, selectors, states
from containers.admin import display as display
from containers.counters import RequestStat
from containers.engines import calls
from containers.engines.base import EngineError
from containers.models import ContainerInstance
from containers.spec import redaction
from streams.guard import db_call
from streams.hub import MISSING, Topic, watch
from streams.merge import merged
from streams.responses import open_stream

REFRESH_SECONDS = 5
CHART_HEIGHT = 80
SERIES_STYLE = (
    (RequestStat.CREATE_ACCEPTED, "accepted", "#198754"),
    (RequestStat.CREATE_REFUSED, "refused", "#fd7e14"),
    (RequestStat.INSTANCE_FAILED, "failed", "#dc3545"),
)


def _chart(series: dict) -> dict:
    """Bars for an inline SVG: per bucket, one bar per series, scaled to the tallest."""
    buckets = series["buckets"]
    tallest = max([1, *(b[name] for b in buckets for name, _, _ in SERIES_STYLE)])
    bar, gap = 6, 6
    group = bar * len(SERIES_STYLE) + gap
    bars = []
    for i, bucket in enumerate(buckets):
        for j, (name, label, colour) in enumerate(SERIES_STYLE):
            height = round(CHART_HEIGHT * bucket[name] / tallest)
            bars.append(
                {
                    "x": i * group + j * bar,
                    "y": CHART_HEIGHT - height,
                    "width": bar - 1,
                    "height": height,
                    "colour": colour,
                    "title": f"{bucket['start']:%H:%M} {label}: {bucket[name]}",
                }
            )
    return {
        "bars": bars,
        "width": len(buckets) * group,
        "height": CHART_HEIGHT,
        "tallest": tallest,
        "legend": [
            {"label": label, "colour": colour, "total": series["totals"][name]}
            for name, label, colour in SERIES_STYLE
        ],
        "first": buckets[0]["start"] if buckets else None,
    }


def _ratio(part, whole) -> int:
    return min(100, round(100 * part / whole)) if whole else 0


def _dashboard_body_context() -> dict:
    """What the dashboard's body shows: the same for every viewer who may see it."""
    stats = selectors.dashboard_stats()
    return {
        "stats": stats,
        "chart": _chart(stats["series"]),
        "pending_pct": _ratio(stats["pending_count"], stats["max_pending"]),
        "active_pct": _ratio(stats["active_count"], stats["max_concurrency"]),
        "links": {
            "pending": reverse("admin:containers_containerinstance_changelist")
            + "?status__exact=pending",
            "dead": reverse("admin:outbox_outboxevent_changelist") + "?status__exact=dead",
            "failures": reverse("admin:containers_containerevent_changelist"),
            "orphans": reverse("admin:containers_orphancontainer_changelist")
            + "?removed_at__isempty=1",
            "runtimes": reverse("admin:containers_runtime_changelist"),
        },
    }


def _dashboard_bodies(keys: list) -> dict:
    html = render_to_string("admin/containers/dashboard_body.html", _dashboard_body_context())
    return dict.fromkeys(keys, html)


# Rendered once per web process per period, whoever watches (``streams.hub``).
DASHBOARD_BODY = Topic("dashboard-body", read=_dashboard_bodies, every=REFRESH_SECONDS)


def queue_dashboard(request, *, admin):
    """Pending vs maxPending, active vs maxConcurrency, dead letters, the last hour.

    Staff with view (or change) permission on instances may look; others get 403. The
    page's body is kept current by ``queue_dashboard_stream``; ``?fragment=1`` answers the
    body alone (what a page without server-sent events fetches).
    """
    if not admin.has_view_or_change_permission(request):
        raise PermissionDenied
    context = {
        **admin.admin_site.each_context(request),
        "title": "Queue dashboard",
        "opts": admin.model._meta,
        "refresh_seconds": REFRESH_SECONDS,
        **_dashboard_body_context(),
    }
    template = (
        "admin/containers/dashboard_body.html"
        if request.GET.get("fragment")
        else "admin/containers/dashboard.html"
    )
    return TemplateResponse(request, template, context)


def _console_rule(admin):
    """A console stream's access rule: its viewer is still staff with view (or change)
    permission on instances."""
    view = f"{admin.opts.app_label}.view_{admin.opts.model_name}"
    change = f"{admin.opts.app_label}.change_{admin.opts.model_name}"

    def allowed(user) -> str | None:
        if user.is_staff and (user.has_perm(view) or user.has_perm(change)):
            return None
        return "you may no longer use the console"

    return allowed


def queue_dashboard_stream(request, *, admin):
    """``GET dashboard/stream/``: server-sent events, ``body`` (the dashboard's body, HTML)
    whenever it changes, ``end`` when the stream ends (``streams``: limits, checks)."""
    if not admin.has_view_or_change_permission(request):
        raise PermissionDenied

    async def source():
        async for html in watch(DASHBOARD_BODY, "all"):
            yield ("body", {"html": html})

    return open_stream(request, source, allowed=_console_rule(admin), sse=True)


# --- live updates of the instance list and page -------------------------------------------

LIVE_MAX_IDS = 200
EVENTS_SHOWN = 50  # an instance's page shows its latest events, and live/ refreshes as many


def _offered(instance) -> dict[str, bool]:
    return {verb: instance.status in states.OFFERED[verb] for verb in states.OFFERED}


def _live_item(row, *, detail: bool) -> dict:
    """What the list (and, with ``detail``, the page) shows of ``row``."""
    item = {
        "status": row.status,
        "status_html": str(display.instance_status_cell(row)),
        "changed_html": str(display.time_ago(row.status_changed_at)),
    }
    if detail:
        events = selectors.instance_events(instance=row)[:EVENTS_SHOWN]
        item.update(
            fields={
                "status_reason": row.status_reason or "-",
                "exit_code": "-" if row.exit_code is None else str(row.exit_code),
                "runtime_node_name": row.runtime_node_name or "-",
                "status_changed_at": display.exact_time(row.status_changed_at),
                "started_at": display.exact_time(row.started_at),
                "finished_at": display.exact_time(row.finished_at),
            },
            fields_html={
                "container_display": str(display.container_line(row)),
                "missing_display": str(display.presence_line(row)),
            },
            offered=_offered(row),
            # The title and the rows together, so its count is the rows it shows.
            events_html=render_to_string(
                "admin/containers/containerinstance/event_history.html",
                {"events": list(events), "history_url": display.history_url(row.id)},
            ),
        )
    return item


def instance_live(request, *, admin):
    """``GET live/?id=<uuid>&id=...[&detail=1]``: what the list and page show, as JSON.

    One query for the rows (the admin's own queryset, so a user sees what the list shows
    them) and, with ``detail``, one for the history of each row. An id that is not (or no
    longer) visible answers ``null``: the page marks it gone. Reads only; no engine call.
    """
    if not admin.has_view_or_change_permission(request):
        raise PermissionDenied
    keys = []
    for raw in request.GET.getlist("id")[:LIVE_MAX_IDS]:
        try:
            keys.append(uuid.UUID(raw))
        except ValueError:
            continue
    rows = {
        row.id: row
        for row in admin.get_queryset(request)
        .select_related("template", "runtime", "owner")
        .filter(id__in=keys)
    }
    detail = request.GET.get("detail") == "1"
    answer = {}
    for key in keys:
        row = rows.get(key)
        answer[str(key)] = None if row is None else _live_item(row, detail=detail)
    return JsonResponse({"instances": answer})


# --- the instance page's stream: its state and its output ------------------------------------

FOLLOWED = frozenset({states.S.RUNNING, states.S.PAUSED, states.S.STOP_PENDING})
PAGE_TAIL = 100  # lines the page's output starts with (the page drew as many)
# The page's stream ends by its own bounds (streams.max_seconds, the idle bound); the
# follow under it needs none of its own. No byte bound: the page keeps the newest text.
PAGE_FOLLOW_SECONDS = 7 * 86400


def instance_stream(request, object_id, *, admin):
    """``GET <id>/stream/``: the instance page's server-sent events.

    ``state`` (what ``live/?detail=1`` answers for it) at once and whenever its state
    changes; ``log`` (``{"text", "reset"}``) its output while it runs (followed again
    from where it was when it runs again); ``problem`` when the engine does not answer;
    ``end`` when the stream ends (the instance gone, the viewer's access lost, the
    stream's limits: ``streams``). No thread and no database connection held between
    events; the state is read for every watched instance at once (``live.INSTANCE_STATE``).
    """
    if not admin.has_view_or_change_permission(request):
        raise PermissionDenied
    try:
        key = uuid.UUID(str(object_id))
    except ValueError:
        raise Http404 from None
    row = admin.get_queryset(request).filter(id=key).first()
    if row is None:
        raise Http404
    user = request.user
    console = _console_rule(admin)
    watches = live.watch_rule(key)

    def allowed(who) -> str | None:
        return console(who) or watches(who)

    sees = redaction.sees_secrets(user)  # here: a permission check may read the database

    def events():
        return _page_events(key, user, sees)

    return open_stream(request, events, allowed=allowed, sse=True)


def _detail(*, instance_id, user) -> dict | None:
    row = selectors.instance_list(user=user).filter(id=instance_id).first()
    return None if row is None else _live_item(row, detail=True)


def _runtime_row(*, instance_id):
    return ContainerInstance.objects.select_related("runtime").filter(id=instance_id).first()


async def _page_events(instance_id, user, sees: bool):
    async def states_source():
        async for value in watch(live.INSTANCE_STATE, instance_id):
            item = (
                None
                if value is MISSING
                else await db_call(_detail, instance_id=instance_id, user=user)
            )
            if item is None:
                yield ("state", None)
                return
            yield ("state", item)

    async def output_source():
        tail = PAGE_TAIL
        async for value in watch(live.INSTANCE_STATE, instance_id):
            if value is MISSING:
                return
            if value[0] not in FOLLOWED:
                continue
            instance = await db_call(_runtime_row, instance_id=instance_id)
            if instance is None:
                return
            try:
                stream = await calls.container_logs_follow(
                    instance=instance, tail=tail, seconds=PAGE_FOLLOW_SECONDS, max_bytes=None
                )
            except (EngineError, docker.errors.DockerException, OSError) as exc:
                yield (
                    "problem",
                    {"text": f"logs unavailable from runtime {instance.runtime.name}: {exc}"},
                )
                continue
            reset = tail > 0
            async for text in live.output_text(stream, sees_secrets=sees, spec=instance.spec):
                yield ("log", {"text": text, "reset": reset})
                reset = False
            tail = 0  # the next follow goes on from the end of this one

    async for item in merged(states_source(), output_source()):
        yield item
