"""This installation's id: the value of the ``io.gobrave.installation`` label it owns.

``container.installation_id`` in config.yml (or ``GOBRAVE_CONTAINER_INSTALLATION_ID``)
wins when set; otherwise the id the first ``migrate`` made and stored in the
``Installation`` row. Containers without our id are never ours: the reconciler neither
syncs nor reports (nor removes) them.
"""

from __future__ import annotations

import secrets

from django.conf import settings

from containers.models import Installation
from core import prepared

# What an installation's id was before ids were made per installation; a database that
# already held instances at the upgrade keeps it (its containers carry that label).
LEGACY_ID = "gobrave"


def new_installation_id() -> str:
    return f"gb-{secrets.token_hex(6)}"


def installation_id() -> str:
    """The configured id, else the stored one (made now if the row is missing).

    Idempotent and safe under concurrency (``get_or_create`` on the one primary key);
    one primary-key read when nothing is configured.
    """
    configured = settings.GOBRAVE["container"]["installation_id"]
    if configured:
        return configured
    stored = prepared.rows(  # every create asks: compiled once, prepared on PostgreSQL
        "installation.stored",
        lambda: Installation.objects.filter(pk=1).values_list("installation_id"),
    )
    if stored:
        return stored[0][0]
    row, _ = Installation.objects.get_or_create(
        pk=1, defaults={"installation_id": new_installation_id()}
    )
    return row.installation_id


def installation_source() -> str:
    """Where ``installation_id()`` comes from, in words for the admin."""
    if settings.GOBRAVE["container"]["installation_id"]:
        return "config.yml (container.installation_id)"
    return "made by the first migrate"
