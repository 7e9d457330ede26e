"""How the operator console draws an instance: its status cell, ages, container line.

Shared by the admin pages and the live endpoint that refreshes them in place
(``admin_views.instance_live``), so a refreshed cell is exactly what a reload shows.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.timesince import timesince

from containers.models import ContainerInstance
from containers.states import Status
from core.admin_helpers import GREY, badge


def history_url(instance_id) -> str:
    """The instance's full event history (the event changelist filtered to it)."""
    changelist = reverse("admin:containers_containerevent_changelist")
    return f"{changelist}?{urlencode({'instance_id': str(instance_id)})}"


STATUS_COLOURS = {
    Status.PENDING: "#6c757d",
    Status.CREATING: "#0d6efd",
    Status.STARTING: "#0d6efd",
    Status.START_PENDING: "#0dcaf0",
    Status.RUNNING: "#198754",
    Status.PAUSED: "#fd7e14",
    Status.STOP_PENDING: "#adb5bd",
    Status.STOPPING: "#adb5bd",
    Status.STOPPED: "#495057",
    Status.DELETE_PENDING: "#6f42c1",
    Status.DELETING: "#6f42c1",
    Status.FAILED: "#dc3545",
}


def status_badge(status: str, *, title: str = ""):
    return badge(status, STATUS_COLOURS.get(status, GREY), title=title)


def instance_status_cell(instance: ContainerInstance):
    """The status badge with why it is so: the exit code and the reason, cut to fit."""
    why = []
    if instance.exit_code is not None and instance.status in (Status.STOPPED, Status.FAILED):
        why.append(f"exit {instance.exit_code}")
    if instance.status_reason:
        why.append(instance.status_reason)
    if instance.runtime_missing:
        why.append("missing on the engine")
    text = ": ".join(why)
    return format_html(
        '<span class="gb-status" data-id="{}">{}{}</span>',
        instance.id,
        status_badge(instance.status, title=instance.status_reason),
        format_html(' <span class="gb-why" title="{}">{}</span>', text, Truncator(text).chars(60))
        if text
        else "",
    )


def time_ago(moment):
    """ "2 minutes ago", the exact time (to the second, UTC) on hover."""
    if moment is None:
        return "-"
    exact = date_format(timezone.localtime(moment), "DATETIME_FORMAT")
    return format_html(
        '<time datetime="{}" title="{}">{} ago</time>',
        moment.isoformat(),
        exact,
        timesince(moment, depth=1),
    )


def exact_time(moment) -> str:
    """A time to the second (``2026-12-01 12:03:04``), or "-"."""
    return date_format(timezone.localtime(moment), "DATETIME_FORMAT") if moment else "-"


def container_line(instance: ContainerInstance):
    """The engine's container: its id once recorded, else the name it has or will have."""
    if instance.container_id:
        return format_html(
            '<code title="{}">{}</code> ({})',
            instance.container_id,
            instance.container_id[:12],
            instance.container_name,
        )
    if instance.status == Status.PENDING:
        return format_html("not created yet; it will be <code>{}</code>", instance.container_name)
    # The id is recorded as soon as the engine's create returns; the name is fixed before.
    if instance.status == Status.CREATING:
        return format_html(
            "<code>{}</code> (being created: the engine's id shows once the engine has made it)",
            instance.container_name,
        )
    return format_html("<code>{}</code> (no container on record)", instance.container_name)


def presence_line(instance: ContainerInstance):
    """Whether the engine still has the container, only ever red when it does not."""
    if instance.runtime_missing:
        return badge("missing", STATUS_COLOURS[Status.FAILED], title="the engine no longer has it")
    if not instance.container_id:
        return "-"
    return "present when last seen"
