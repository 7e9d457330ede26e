"""An advance that goes dead fails its run with the reason; the run never hangs silently.

Driven through the real relay in-process (claim, execute, dead letter) on PostgreSQL.
"""

from __future__ import annotations

import pytest

from dags.history import ADVANCE
from dags.models import DagEvent, DagNodeRun, DagRun
from dags.services import dag_run_retry_failed, dag_run_start, dag_template_save
from outbox import relay
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from tests.processes import outbox_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def doomed(owner, template, gobrave_config):
    """A two-node run whose every advance raises (its template snapshot is gone)."""
    gobrave_config(outbox={"max_attempts": 1})
    dag = dag_template_save(
        name="doomed",
        nodes=[
            {"key": "a", "template": "sleeper"},
            {"key": "b", "template": "sleeper", "depends_on": ["a"]},
        ],
    )
    run = dag_run_start(dag=dag, owner=owner, actor="test")
    DagRun.objects.filter(pk=run.pk).update(templates={})
    return run


def test_a_dead_advance_fails_the_run_with_its_reason_and_asks_for_a_cleanup(doomed):
    [(row_id, token)] = relay.claim("control", 16)
    assert relay.execute(row_id, token) == Outcome.DEAD, outbox_rows()
    assert OutboxEvent.objects.get(pk=row_id).status == "dead", outbox_rows()

    run = DagRun.objects.get(pk=doomed.pk)
    assert run.status == "failed", (run.status, run.reason)
    assert run.reason.startswith(f"the runner failed: advance #{row_id} dead: "), run.reason
    assert "IndexError" in run.reason, run.reason
    nodes = {n.key: (n.status, n.reason) for n in DagNodeRun.objects.filter(run=run)}
    assert nodes == {"a": ("skipped", run.reason), "b": ("skipped", run.reason)}, nodes
    moves = [
        (e.from_status, e.to_status)
        for e in DagEvent.objects.filter(run_id=run.pk, node="").order_by("id")
        if e.kind == "transition"
    ]
    assert moves[-2:] == [("pending", "running"), ("running", "failed")], moves
    # A fresh advance is due to clean up by the policies; the dead row stays for diagnosis.
    waiting = OutboxEvent.objects.filter(kind=ADVANCE, aggregate_id=str(run.pk), status="pending")
    assert waiting.count() == 1, outbox_rows()


def test_a_run_failed_by_a_dead_advance_can_be_retried(doomed):
    [(row_id, token)] = relay.claim("control", 16)
    relay.execute(row_id, token)
    run = dag_run_retry_failed(run_id=doomed.pk, actor="test")
    assert run.status == "running"
    assert {n.status for n in DagNodeRun.objects.filter(run=run)} == {"waiting"}
