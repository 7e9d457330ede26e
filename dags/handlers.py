"""The ``DagRunAdvance`` outbox handler, registered with the relay at start."""

from __future__ import annotations

from containers.queues import Queue
from dags.history import ADVANCE, RUNNER
from dags.runner import dag_run_advance, dag_runs_at_cold_start
from dags.services import dag_run_fail
from outbox import liveness, registry
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome


def handle_advance(event: OutboxEvent) -> Outcome:
    return dag_run_advance(run_id=event.aggregate_id)


def on_advance_dead(event: OutboxEvent, reason: str) -> None:
    """An advance went dead (its last attempt, or a permanent error): the run would
    wait for ever, so it is failed with the reason (``dag_run_fail``)."""
    dag_run_fail(
        run_id=event.aggregate_id,
        reason=f"the runner failed: advance #{event.id} dead: {reason}",
        actor=RUNNER,
    )


def register() -> None:
    """Route advances to the control queue (they never wait for the capacity gate), fail
    a run whose advance went dead, and decide runs at a cold start."""
    registry.register(ADVANCE, queue=Queue.CONTROL, handler=handle_advance, on_dead=on_advance_dead)
    liveness.on_cold_start(dag_runs_at_cold_start)
