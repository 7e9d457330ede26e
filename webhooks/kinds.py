"""The event kinds an endpoint may subscribe to, the outbox kind of a delivery and its queue.

One home for these names: the emitters (containers, dags), the API's choices, the admin
form and the docs' table all read them here.
"""

from __future__ import annotations

import enum

DELIVERY_KIND = "WebhookDelivery"  # the outbox row of one delivery to one endpoint
QUEUE = "webhooks"  # the django-q2 cluster that runs deliveries (gobrave.settings)


class EventKind(enum.StrEnum):
    INSTANCE_FAILED = "instance.failed"
    INSTANCE_CULLED = "instance.culled"  # stopped by a lifecycle policy (actor "policy")
    REQUEST_DEAD = "request.dead"  # a container request went dead (a dead letter)
    ENGINE_UNREACHABLE = "engine.unreachable"
    ENGINE_REACHABLE = "engine.reachable"  # back after being unreachable
    DAG_RUN_FINISHED = "dag_run.finished"
    LIMIT_HIT = "limit.hit"  # creates refused by a quota or a full queue (operators only)


# Kinds only operator-wide endpoints receive: they concern no one owner's instances.
OPERATOR_ONLY = frozenset(
    {EventKind.ENGINE_UNREACHABLE, EventKind.ENGINE_REACHABLE, EventKind.LIMIT_HIT}
)


def aggregate_of(endpoint_id: int) -> str:
    """The outbox aggregate of an endpoint's deliveries: they run one at a time, in order."""
    return f"webhook:{endpoint_id}"
