"""The DAG run and node state machines, defined once (contract §7).

``RUN_TRANSITIONS`` and ``NODE_TRANSITIONS`` are the contract's tables; the models'
django-fsm transitions are built from them, and nothing else decides which moves are
allowed.
"""

from __future__ import annotations

from django.db import models


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class NodeStatus(models.TextChoices):
    WAITING = "waiting"
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


R, N = RunStatus, NodeStatus

RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    R.PENDING: frozenset({R.RUNNING, R.CANCELLED}),
    R.RUNNING: frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLING}),
    R.CANCELLING: frozenset({R.CANCELLED, R.FAILED}),
    R.SUCCEEDED: frozenset(),
    R.FAILED: frozenset({R.RUNNING}),
    R.CANCELLED: frozenset(),
}

NODE_TRANSITIONS: dict[str, frozenset[str]] = {
    N.WAITING: frozenset({N.READY, N.SKIPPED, N.CANCELLED}),
    N.READY: frozenset({N.RUNNING, N.FAILED, N.CANCELLED}),
    N.RUNNING: frozenset({N.SUCCEEDED, N.FAILED, N.CANCELLED}),
    N.SUCCEEDED: frozenset(),
    N.FAILED: frozenset({N.READY, N.WAITING}),
    N.SKIPPED: frozenset({N.WAITING}),
    N.CANCELLED: frozenset(),
}

# Runs that the runner still moves; runs that have ended.
RUN_ACTIVE = frozenset({R.PENDING, R.RUNNING, R.CANCELLING})
RUN_FINISHED = frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLED})
# Runs that "cancel" moves (a cancelling or cancelled run is a no-op, a finished one is
# refused); runs that "retry failed" moves. The admin offers each button only on these.
RUN_CANCELLABLE = frozenset({R.PENDING, R.RUNNING})
RUN_RETRYABLE = frozenset({R.FAILED})
# Nodes that can still move within the current pass; nodes that are done.
NODE_OPEN = frozenset({N.WAITING, N.READY, N.RUNNING})
NODE_DONE = frozenset({N.SUCCEEDED, N.FAILED, N.SKIPPED, N.CANCELLED})


def run_sources_of(target: str) -> list[str]:
    return [source for source in RunStatus if target in RUN_TRANSITIONS[source]]


def node_sources_of(target: str) -> list[str]:
    return [source for source in NodeStatus if target in NODE_TRANSITIONS[source]]
