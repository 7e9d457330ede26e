"""The relay's settings (``settings.OUTBOX``), with derived lease and in-flight limits."""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from outbox import registry

NOTIFY_CHANNEL = "gobrave_outbox"


def value(key: str):
    return settings.OUTBOX[key]


def lease() -> dt.timedelta:
    """How long a claim holds: the delivery timeout plus a safety margin."""
    return dt.timedelta(seconds=value("delivery_timeout") + value("lease_margin"))


def in_flight_limit(queue: str) -> int:
    """At most this many rows of ``queue`` in ``processing`` at once.

    The queue's worker count, so that no claimed row waits in django-q2's queue while
    its lease runs out; ``max_in_flight`` caps the total across queues when set.
    """
    workers = registry.queues().get(queue, 1)
    cap = value("max_in_flight")
    return min(workers, cap) if cap else workers


def is_postgres(connection) -> bool:
    return connection.vendor == "postgresql"
