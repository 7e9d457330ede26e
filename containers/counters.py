"""The containers app's counter names, bumped with ``core.counters.counter_bump``."""

from __future__ import annotations

import enum


class RequestStat(enum.StrEnum):
    CREATE_ACCEPTED = "create_accepted"
    CREATE_REFUSED = "create_refused"  # queue_full, owner_quota or quota_exceeded
    INSTANCE_FAILED = "instance_failed"
