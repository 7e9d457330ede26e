"""Template tags of the operator console."""

from __future__ import annotations

from dataclasses import dataclass

from django import template
from django.urls import reverse

from containers import selectors
from containers.engines.labels import LABEL_INSTALLATION
from containers.installation import installation_id, installation_source
from containers.queues import event_kind_display

register = template.Library()


@dataclass(frozen=True)
class Tile:
    """One count on the admin index and the filtered list it leads to."""

    key: str
    label: str
    number: str
    href: str


def _changelist(name: str, query: str) -> str:
    return f"{reverse(f'admin:{name}_changelist')}?{query}"


def home_tiles(user) -> list[Tile]:
    """The counts ``user`` may see, each with the changelist filtered to what it counts:
    instance counts need a view or change permission on instances, dead letters on outbox
    rows, engines on runtimes. The counting is ``selectors.operator_home_counts``."""
    may = {
        "instances": user.has_perm("containers.view_containerinstance")
        or user.has_perm("containers.change_containerinstance"),
        "dead_letters": user.has_perm("outbox.view_outboxevent")
        or user.has_perm("outbox.change_outboxevent"),
        "engines": user.has_perm("containers.view_runtime")
        or user.has_perm("containers.change_runtime"),
    }
    if not any(may.values()):
        return []
    counts = selectors.operator_home_counts(**may)
    tiles = []
    if may["instances"]:
        instances = "containers_containerinstance"
        tiles += [
            Tile(
                "running",
                "running",
                str(counts["running"]),
                _changelist(instances, "status__exact=running"),
            ),
            Tile(
                "pending",
                "pending",
                str(counts["pending"]),
                _changelist(instances, "status__exact=pending"),
            ),
            Tile(
                "failed",
                "failed in the last hour",
                str(counts["failed_last_hour"]),
                _changelist(instances, "status__exact=failed&changed=1h"),
            ),
        ]
    if may["dead_letters"]:
        tiles.append(
            Tile(
                "dead",
                "dead letters",
                str(counts["dead_letters"]),
                _changelist("outbox_outboxevent", "status__exact=dead"),
            )
        )
    if may["engines"]:
        tiles.append(
            Tile(
                "engines",
                "engines reachable",
                f"{counts['engines_reachable']} of {counts['engines_enabled']}",
                _changelist("containers_runtime", "enabled__exact=1&health__exact=reachable"),
            )
        )
    return tiles


@register.inclusion_tag("admin/containers/home.html", takes_context=True)
def operator_home(context) -> dict[str, object]:
    """The admin index's console box: the counts the user may see, the dashboard link and
    the installation line for those who may see instances."""
    user = context["request"].user
    sees_instances = user.has_perm("containers.view_containerinstance") or user.has_perm(
        "containers.change_containerinstance"
    )
    return {
        "tiles": home_tiles(user),
        "sees_instances": sees_instances,
        **(installation_line() if sees_instances else {}),
    }


@register.inclusion_tag("admin/containers/installation.html")
def installation_line() -> dict[str, str]:
    """This installation's id, the label it owns on the engines, and where the id comes from."""
    return {
        "installation_id": installation_id(),
        "label": LABEL_INSTALLATION,
        "source": installation_source(),
    }


@register.filter
def kind_words(kind: str) -> str:
    """An instance history entry's kind in words (``queues.event_kind_display``)."""
    return event_kind_display(kind)
