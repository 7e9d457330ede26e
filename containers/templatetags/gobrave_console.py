"""Template tags of the operator console."""

from __future__ import annotations

from django import template

from containers.engines.labels import LABEL_INSTALLATION
from containers.installation import installation_id, installation_source
from containers.queues import event_kind_display

register = template.Library()


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
