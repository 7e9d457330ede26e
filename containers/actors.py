"""Who did it: the one vocabulary of ``ContainerEvent.actor`` (and the outbox's ``by``).

People are ``user:<username>``, whichever door they came through (the API, the admin or
``manage.py``); gobrave's own parts are the bare words below. The actor filter of the
event history therefore shows each person once.
"""

from __future__ import annotations

WORKER = "worker"  # a django-q2 task running a request
MONITOR = "monitor"  # the engine event follower
RECONCILER = "reconciler"  # the periodic (or on-demand) comparison with the engines
RELAY = "relay"  # the outbox relay (dead letters)
POLICY = "policy"  # the lifecycle policies' pass (time limits, idle culling, retention)
SYSTEM = frozenset({WORKER, MONITOR, RECONCILER, RELAY, POLICY})
USER_PREFIX = "user:"


def user_actor(user_or_name) -> str:
    """``user:<username>`` for a user object or a username."""
    name = user_or_name if isinstance(user_or_name, str) else user_or_name.get_username()
    return f"{USER_PREFIX}{name}"
