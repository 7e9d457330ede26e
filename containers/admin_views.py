"""The queue dashboard inside the admin (``/admin/containers/containerinstance/dashboard/``).

Numbers come from ``selectors.dashboard_stats()``; this module only shapes them for the
page (the chart's bar heights) and renders. ``?fragment=1`` returns the body alone, which
the page fetches every few seconds to refresh itself.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse

from containers import selectors

REFRESH_SECONDS = 5
CHART_HEIGHT = 80
SERIES_STYLE = (
    ("create_accepted", "accepted", "#198754"),
    ("create_refused", "refused", "#fd7e14"),
    ("instance_failed", "failed", "#dc3545"),
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
