"""The console's own views: the queue dashboard and the instances' live updates.

The dashboard is ``/admin/containers/containerinstance/dashboard/``; ``live/`` beside it
answers the JSON that ``containers/static/containers/live.js`` polls to refresh the
instance list and page in place.

Numbers come from ``selectors.dashboard_stats()``; this module only shapes them for the
page (the chart's bar heights) and renders. ``?fragment=1`` returns the body alone, which
the page fetches every few seconds to refresh itself.
"""

from __future__ import annotations

import uuid

from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse

from containers import selectors, states
from containers.admin import display as display
from containers.counters import RequestStat

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


def queue_dashboard(request, *, admin):
    """Pending vs maxPending, active vs maxConcurrency, dead letters, the last hour.

    Staff with view (or change) permission on instances may look; others get 403.
    """
    if not admin.has_view_or_change_permission(request):
        raise PermissionDenied
    stats = selectors.dashboard_stats()
    context = {
        **admin.admin_site.each_context(request),
        "title": "Queue dashboard",
        "opts": admin.model._meta,
        "stats": stats,
        "chart": _chart(stats["series"]),
        "pending_pct": _ratio(stats["pending_count"], stats["max_pending"]),
        "active_pct": _ratio(stats["active_count"], stats["max_concurrency"]),
        "refresh_seconds": REFRESH_SECONDS,
        "links": {
            "pending": reverse("admin:containers_containerinstance_changelist")
            + "?status__exact=pending",
            "dead": reverse("admin:outbox_outboxevent_changelist") + "?status__exact=dead",
            "failures": reverse("admin:containers_containerevent_changelist"),
            "orphans": reverse("admin:containers_orphancontainer_changelist")
            + "?removed_at__isempty=1",
        },
    }
    template = (
        "admin/containers/dashboard_body.html"
        if request.GET.get("fragment")
        else "admin/containers/dashboard.html"
    )
    return TemplateResponse(request, template, context)


# --- live updates of the instance list and page -------------------------------------------

LIVE_MAX_IDS = 200
EVENTS_SHOWN = 50  # an instance's page shows its latest events, and live/ refreshes as many


def _offered(instance) -> dict[str, bool]:
    return {verb: instance.status in states.OFFERED[verb] for verb in states.OFFERED}


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
        if row is None:
            answer[str(key)] = None
            continue
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
        answer[str(key)] = item
    return JsonResponse({"instances": answer})
