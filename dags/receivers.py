"""What the runner hears from the containers app: a node's instance settled or went, or
an engine was decommissioned.

Connected in ``DagsConfig.ready()``. The instance receivers run inside the transaction
that holds the instance's row lock, and only write an outbox row (``advance_soon``):
they never lock a run, so container code never waits on DAG rows. The runtime
receivers run with no instance row locked (``containers.signals``): they may lock runs.
"""

from __future__ import annotations

from containers.states import Status
from dags.history import LABEL_DAG_RUN, advance_soon, runner_actor
from dags.services import dag_runs_on_runtime, dag_runs_runtime_gone

# Moves after which a node may have something to say: it ended, or someone asked to
# stop or delete it (the runner's own asks are skipped: it knows).
SETTLING = frozenset({Status.STOPPED, Status.FAILED, Status.STOP_PENDING, Status.DELETE_PENDING})
ASKED = frozenset({Status.STOP_PENDING, Status.DELETE_PENDING})


def _run_of(instance) -> str | None:
    labels = (instance.spec or {}).get("labels") or {}
    return labels.get(LABEL_DAG_RUN)


def on_instance_moved(sender, *, instance, source, target, actor, **kwargs) -> None:
    run_id = _run_of(instance)
    if run_id is None or target not in SETTLING:
        return
    if target in ASKED and actor == runner_actor(run_id):
        return
    advance_soon(run_id, why=f"instance {instance.id} {source} -> {target}")


def on_instance_removed(sender, *, instance, actor, **kwargs) -> None:
    run_id = _run_of(instance)
    if run_id is not None:
        advance_soon(run_id, why=f"instance {instance.id} removed")


def on_runtime_placements(sender, *, runtime, **kwargs) -> list[str]:
    return dag_runs_on_runtime(runtime_id=runtime.pk)


def on_runtime_decommissioned(sender, *, runtime, reason, actor, **kwargs) -> list[str]:
    return dag_runs_runtime_gone(
        runtime_id=runtime.pk, runtime_name=runtime.name, reason=reason, actor=actor
    )
