"""The ``DagRunAdvance`` outbox handler, registered with the relay at start."""

from __future__ import annotations

from containers.queues import Queue
from dags.history import ADVANCE
from dags.runner import dag_run_advance, dag_runs_at_cold_start
from outbox import liveness, registry
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome


def handle_advance(event: OutboxEvent) -> Outcome:
    return dag_run_advance(run_id=event.aggregate_id)


def register() -> None:
    """Route advances to the control queue (they never wait for the capacity gate), and
    decide runs at a cold start."""
    registry.register(ADVANCE, queue=Queue.CONTROL, handler=handle_advance)
    liveness.on_cold_start(dag_runs_at_cold_start)
