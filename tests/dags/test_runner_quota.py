"""A node's create refused for its owner's quota (contract §7; quotas: docs/security.md).

The runner runs in-process against the real PostgreSQL (its creates need no engine);
the node's instance is moved as a worker would move it (``containers.requests.lifecycle.move``).
"""

from __future__ import annotations

import pytest
from django.db import transaction

from containers.models import ContainerInstance
from containers.requests.lifecycle import move
from containers.states import Status
from dags.history import instance_id_for
from dags.models import DagEvent, DagNodeRun, DagRun
from dags.runner import dag_run_advance
from dags.services import dag_run_start, dag_template_save
from outbox.registry import Defer
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db


def start(owner, nodes: list[dict]) -> DagRun:
    dag = dag_template_save(name="quota", nodes=[{"template": "sleeper", **n} for n in nodes])
    return dag_run_start(dag=dag, owner=owner, actor="test")


def nodes(run: DagRun) -> dict[str, DagNodeRun]:
    return {n.key: n for n in DagNodeRun.objects.filter(run=run)}


def describe(run: DagRun) -> str:
    row = DagRun.objects.get(pk=run.pk)
    return f"run {row.status} ({row.reason}): " + "; ".join(
        f"{n.key}={n.status} a{n.attempt} t{n.tries} ({n.reason})" for n in nodes(run).values()
    )


def exits(instance_id, code: int) -> None:
    """The node's container ran and exited, as the worker records it."""
    with transaction.atomic():
        instance = ContainerInstance.objects.select_for_update().get(pk=instance_id)
        move(instance, Status.CREATING, actor="worker")
        move(instance, Status.STOPPED, actor="worker", exit_code=code)


def test_a_node_over_its_owner_s_quota_waits_for_room_and_then_gets_its_instance(
    owner, template, gobrave_config
):
    gobrave_config(
        container={"max_instances_per_owner": 1, "delete_container_on_node_success": True}
    )
    run = start(owner, [{"key": "a"}, {"key": "b"}])

    # a is created; b is refused for the quota while a is in flight: it waits, ready.
    with pytest.raises(Defer):
        dag_run_advance(run_id=str(run.pk))
    a, b = nodes(run)["a"], nodes(run)["b"]
    assert (a.status, b.status, b.attempt, b.tries) == ("running", "ready", 0, 0), describe(run)

    # a's container exits 0: a succeeds; its instance (still counted by the quota) is
    # deleted by this same advance after its creates, so b waits again, not fails.
    exits(a.instance_id, 0)
    with pytest.raises(Defer):
        dag_run_advance(run_id=str(run.pk))
    b = nodes(run)["b"]
    assert (nodes(run)["a"].status, b.status, b.tries) == ("succeeded", "ready", 0), describe(run)
    assert ContainerInstance.objects.get(pk=a.instance_id).status == Status.DELETE_PENDING

    # Room now (an instance being deleted is not counted): b gets its first instance.
    assert dag_run_advance(run_id=str(run.pk)) == "sent"
    b = nodes(run)["b"]
    assert (b.status, b.attempt, b.tries) == ("running", 1, 1), describe(run)
    assert ContainerInstance.objects.filter(pk=b.instance_id, status=Status.PENDING).exists()
    assert not DagEvent.objects.filter(run_id=run.pk, node="b", to_status="failed").exists()


def test_a_node_over_its_owner_s_quota_with_nothing_in_flight_fails_at_once(
    owner, template, fake_runtime, gobrave_config
):
    gobrave_config(container={"max_instances_per_owner": 1})
    InstanceFactory(owner=owner, template=template, runtime=fake_runtime, status="stopped")
    run = start(owner, [{"key": "a"}])

    assert dag_run_advance(run_id=str(run.pk)) == "sent"  # not deferred: nothing to wait for
    a = nodes(run)["a"]
    assert (a.status, a.tries) == ("failed", 1), describe(run)
    assert a.reason.startswith("create refused: max_instances_per_owner"), describe(run)
    row = DagRun.objects.get(pk=run.pk)
    assert (row.status, row.reason) == ("failed", f"node a failed: {a.reason}")


def test_a_node_whose_template_was_closed_to_its_owner_mid_run_is_refused_and_fails(
    owner, template, fake_runtime
):
    """The runner reads the template and whether the owner may use it in one query: a
    template limited to a group the owner is not in, after the run started, refuses
    the next node's create (it fails, naming why) instead of making it."""
    from django.contrib.auth.models import Group

    run = start(owner, [{"key": "a"}, {"key": "b", "depends_on": ["a"]}])
    assert dag_run_advance(run_id=str(run.pk)) == "sent"
    exits(nodes(run)["a"].instance_id, 0)
    template.allowed_groups.add(Group.objects.create(name="lab"))
    dag_run_advance(run_id=str(run.pk))
    b = nodes(run)["b"]
    assert b.status == "failed", describe(run)
    assert "not open to" in b.reason, describe(run)
    assert not ContainerInstance.objects.filter(pk=instance_id_for(run.pk, "b", 1)).exists(), (
        describe(run)
    )
    assert DagRun.objects.get(pk=run.pk).status == "failed", describe(run)
