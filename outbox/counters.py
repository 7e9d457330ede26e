"""The relay's counter names, bumped with ``core.counters.counter_bump``.

The API (``/api/queue/``), the dashboard and ``/metrics`` show every member, in this order.
"""

from __future__ import annotations

import enum


class RelayStat(enum.StrEnum):
    CLAIMED = "claimed"  # rows handed to a worker queue
    SENT = "sent"
    SUPERSEDED = "superseded"
    DEFERRED = "deferred"  # capacity denied, back to pending without an attempt
    RETRIED = "retried"
    DEAD = "dead"
    RECLAIMED_UNSTARTED = "reclaimed_unstarted"  # a claim ran out before any worker began it
    CLUSTER_RESTARTED = "cluster_restarted"  # the supervisor restarted a wedged cluster
