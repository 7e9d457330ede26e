"""The outbox handler (``dag_run_advance``: the three steps, a few rounds) and the
recovery of active runs at a cold start (``dag_runs_at_cold_start``)."""

from __future__ import annotations

import datetime as dt

from django.db.models.functions import Now

from dags.history import RECOVERY, advance_soon, node_move, record, run_move
from dags.models import DagRun
from dags.runner.cleanup import _step_cleanup
from dags.runner.create import _step_create
from dags.runner.passes import MAX_ROUNDS, NOT_RECOVERED, RECOVERED_AT_START, N, Pass, R, _config
from dags.runner.settle import _step_settle
from outbox import conf as outbox_conf
from outbox.liveness import COLD_AFTER
from outbox.outcomes import Outcome
from outbox.registry import Defer


def dag_run_advance(*, run_id: str) -> Outcome:
    """Advance one run as the module docstring says. Must run outside a transaction.

    Idempotent. Raises ``Defer`` when a node waits for room in the create queue (the
    relay asks again after ``poll_interval``, or sooner when something settles).
    """
    full = False
    work = Pass()
    for _ in range(MAX_ROUNDS):
        work = _step_settle(run_id)
        if work.run is None:
            return Outcome.SUPERSEDED
        failed, full = work.first == "failed", work.first == "full"
        if work.ready:  # creates first: the next node waits on nothing else
            more_failed, full = _step_create(work)
            failed |= more_failed
        _step_cleanup(work)
        if not failed:
            break
    if full:
        raise Defer(f"dag run {run_id}: the create queue is full; nodes wait")
    return Outcome.SENT


def dag_runs_at_cold_start() -> None:
    """At a cold start (``outbox.liveness``), under the start lock: advance every active
    run again from stored state (``recover_running_dag_on_start``), or fail it with the
    reason "not recovered at start" and let the runner clean up by the policies.

    Only runs that nothing moved during the cold window are the crash's: a run (or one
    of its nodes) that changed within it is in the hands of workers alive now (they
    claim rows without a dispatcher), and is left to them.
    """
    recover = _config()["recover_running_dag_on_start"]
    quiet = Now() - dt.timedelta(seconds=COLD_AFTER * outbox_conf.value("poll_interval"))
    runs = (
        DagRun.objects.select_for_update()
        .filter(status__in=[R.PENDING, R.RUNNING, R.CANCELLING], status_changed_at__lt=quiet)
        .exclude(nodes__status_changed_at__gte=quiet)
    )
    for run in runs:
        if recover or run.status == R.PENDING:
            record(
                run.id,
                owner_id=run.owner_id,
                kind="recover",
                actor=RECOVERY,
                message=RECOVERED_AT_START,
            )
        else:
            for node in run.nodes.all():
                if node.status in (N.RUNNING, N.READY):
                    node_move(node, N.FAILED, actor=RECOVERY, reason=NOT_RECOVERED)
                elif node.status == N.WAITING:
                    node_move(node, N.SKIPPED, actor=RECOVERY, reason=NOT_RECOVERED)
            run_move(run, R.FAILED, actor=RECOVERY, reason=NOT_RECOVERED)
        advance_soon(run.id, why="installation restarted")
