"""Helpers for the outbox tests: a test kind on a test queue, and its rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction

from outbox import registry
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import DeadHook, Handler, RetryHook
from outbox.services import outbox_enqueue


def sent(event: OutboxEvent) -> Outcome:
    return Outcome.SENT


@contextmanager
def kind_registered(
    kind: str,
    *,
    queue: str,
    workers: int,
    handler: Handler = sent,
    on_dead: DeadHook | None = None,
    on_retry: RetryHook | None = None,
) -> Iterator[None]:
    """Register ``kind`` on ``queue`` (of ``workers`` workers) for the block; afterwards
    the kind, the queue and any claim guard the test set on it are gone again."""
    registry.register_queue(queue, workers)
    registry.register(kind, queue=queue, handler=handler, on_dead=on_dead, on_retry=on_retry)
    try:
        yield
    finally:
        registry._routes.pop(kind, None)
        registry._queues.pop(queue, None)
        registry._claim_guards.pop(queue, None)


def enqueue_row(kind: str, aggregate: str = "a", key: str = "") -> OutboxEvent:
    """One row of ``kind`` for ``aggregate`` (fairness key ``key``), in a transaction of
    its own."""
    with transaction.atomic():
        return outbox_enqueue(kind=kind, aggregate_id=aggregate, payload={}, fairness_key=key)
