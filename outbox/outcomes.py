"""Every outcome of one delivery of a claimed outbox row, in one enum.

A handler returns ``SENT`` or ``SUPERSEDED`` (or raises one of ``outbox.registry``'s
signals); the relay records the others. The row's ``outcome`` column keeps the last one
recorded (``sent``, ``superseded``, ``deferred``, ``retried``, ``dead``);
``relay.execute`` also returns ``duplicate`` and ``stale``, which are never stored.
"""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    SENT = "sent"  # the handler did its work
    SUPERSEDED = "superseded"  # the aggregate moved on; nothing to do, recorded as sent
    DEFERRED = "deferred"  # capacity denied: pending again, no attempt counted
    RETRIED = "retried"  # a retriable error: pending again after a backoff, attempt counted
    DEAD = "dead"  # a permanent error, or the last attempt
    DUPLICATE = "duplicate"  # a second delivery of the same claim: ignored
    STALE = "stale"  # the claim was lost before the outcome: nothing recorded


# What a handler may return.
HANDLER_OUTCOMES = frozenset({Outcome.SENT, Outcome.SUPERSEDED})
