"""Cordon, uncordon and decommission of engines (issue 27, item 5), through the services.

The decommission's engine never exists: a docker runtime at a closed port, so any call
to it would raise, and the test would say so.
"""

from __future__ import annotations

import sys
import uuid

import pytest
from django.db.models import ProtectedError

from containers.errors import InvalidRuntime, RuntimesCordoned
from containers.execution.handlers import handle_create
from containers.fleet.runtimes import runtime_update
from containers.fleet.selectors import runtime_decommission_preview
from containers.fleet.services import (
    DECOMMISSIONED,
    runtime_cordon,
    runtime_decommission,
    runtime_uncordon,
)
from containers.models import ContainerEvent, ContainerInstance, Runtime, RuntimeEvent
from containers.placement.choice import runtime_select
from containers.requests.services import container_create_by_template, container_start
from containers.states import Status
from dags.models import DagEvent, DagNodeRun, DagRun
from dags.runner import dag_run_advance
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory, TemplateFactory
from tests.placing import place

pytestmark = pytest.mark.django_db

GONE = "tcp://127.0.0.1:9"  # the discard port: nothing listens there


@pytest.fixture
def engines_asked(monkeypatch) -> list[str]:
    """Every engine object asked for, by any module of ours that imported ``engine_for``
    (the spy hands out the real engine: a call to it still fails at the closed port)."""
    import containers.engines

    asked: list[str] = []
    real = containers.engines.engine_for

    def spy(runtime):
        asked.append(runtime.name)
        return real(runtime)

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("containers", "dags") and hasattr(module, "engine_for"):
            monkeypatch.setattr(module, "engine_for", spy)
    return asked


def _runtimes(*names: str) -> list[Runtime]:
    return [
        RuntimeFactory(name=name, labels={"engine": "fake", "pool": "a"}, base_url=GONE)
        for name in names
    ]


def _placed(instance: ContainerInstance, status: str) -> ContainerInstance:
    ContainerInstance.objects.filter(pk=instance.pk).update(status=status)
    instance.refresh_from_db()
    return instance


def _history(instance_id) -> list[tuple[str, str, str, str]]:
    rows = ContainerEvent.objects.filter(instance_id=instance_id).order_by("created_at", "id")
    return [(e.kind, e.from_status, e.to_status, e.message) for e in rows]


# --- cordon ---------------------------------------------------------------------------------


def test_cordon_then_uncordon_records_who_and_when_and_repeats_change_nothing():
    (runtime,) = _runtimes("r1")
    cordoned = runtime_cordon(runtime_id=runtime.pk, actor="user:op")
    first = (cordoned.cordoned, cordoned.cordoned_by, cordoned.cordoned_at)
    assert first[0] is True and first[1] == "user:op" and first[2] is not None, first
    again = runtime_cordon(runtime_id=runtime.pk, actor="user:other")
    assert (again.cordoned, again.cordoned_by, again.cordoned_at) == first
    opened = runtime_uncordon(runtime_id=runtime.pk, actor="user:op")
    row = Runtime.objects.get(pk=runtime.pk)
    assert (opened.cordoned, row.cordoned, row.cordoned_by, row.cordoned_at) == (
        False, False, "", None,
    ), vars(row)  # fmt: skip
    assert runtime_uncordon(runtime_id=runtime.pk, actor="user:op").cordoned is False


def test_a_new_create_skips_the_cordoned_engine_even_when_it_is_the_least_loaded(owner):
    busy, idle = _runtimes("busy", "idle")
    InstanceFactory(runtime=busy, status="running")
    template = TemplateFactory(constraints={"pool": "a"})

    def placed_on() -> str:
        made = container_create_by_template(template=template, owner=owner, actor="user:a")
        return place(made).runtime.name

    assert placed_on() == "idle"  # least loaded (0 of 1), before the cordon
    runtime_cordon(runtime_id=idle.pk, actor="user:op")
    assert placed_on() == "busy"


def test_a_create_whose_only_engines_are_cordoned_waits_in_pending_naming_them(owner):
    """No longer refused (the 409 ``runtimes_cordoned`` of a create is gone): accepted,
    unplaced, it waits with the reason and is placed once an engine is uncordoned."""
    one, two = _runtimes("one", "two")
    for runtime in (one, two):
        runtime_cordon(runtime_id=runtime.pk, actor="user:op")
    template = TemplateFactory(constraints={"pool": "a"})
    instance = container_create_by_template(template=template, owner=owner, actor="user:alice")
    waiting = place(instance)
    assert (waiting.status, waiting.runtime, waiting.status_reason) == (
        "pending",
        None,
        "waiting: no engine with room: one cordoned, two cordoned",
    ), vars(waiting)
    assert OutboxEvent.objects.filter(aggregate_id=str(instance.pk), status="pending").exists()
    runtime_uncordon(runtime_id=two.pk, actor="user:op")
    placed = place(instance)
    assert (placed.status, placed.runtime.name) == ("creating", "two"), vars(placed)


def test_a_new_dag_run_skips_cordoned_engines_but_a_placed_run_keeps_its_engine(owner):
    cordoned, other = _runtimes("c", "o")
    runtime_cordon(runtime_id=cordoned.pk, actor="user:op")
    first, second = TemplateFactory(constraints={"pool": "a"}), TemplateFactory()
    assert runtime_select(template=first, templates=[second]) == other
    # A run placed on it before the cordon: its next node's create is pinned there.
    node = container_create_by_template(template=first, owner=owner, actor="dag", runtime=cordoned)
    assert node.runtime == cordoned  # a pin, not a placement: kept while pending
    placed = place(node)
    assert (placed.status, placed.runtime, placed.placement_reason) == (
        "creating",
        cordoned,
        "pinned: the DAG run's engine, c",
    ), vars(placed)
    runtime_cordon(runtime_id=other.pk, actor="user:op")
    with pytest.raises(RuntimesCordoned):  # a new run, every engine cordoned
        runtime_select(template=first)


def test_a_start_of_an_instance_on_a_cordoned_engine_is_accepted_for_that_engine():
    (runtime,) = _runtimes("r")
    instance = InstanceFactory(runtime=runtime, status="stopped")
    _placed(instance, Status.STOPPED)
    runtime_cordon(runtime_id=runtime.pk, actor="user:op")
    result = container_start(instance_id=instance.id, actor="user:alice")
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (result.queued, row.status, row.runtime_id) == (True, "start_pending", runtime.pk), (
        row.status,
        row.runtime_id,
    )


# --- decommission -----------------------------------------------------------------------------

ALL_STATES = [s.value for s in Status]


@pytest.mark.parametrize("status", ALL_STATES)
def test_decommission_deletes_an_instance_in_any_state_with_its_history_and_no_engine_call(
    status, engines_asked
):
    (runtime,) = _runtimes("gone")
    instance = _placed(InstanceFactory(runtime=runtime), status)
    result = runtime_decommission(runtime_id=runtime.pk, actor="user:op")
    assert engines_asked == []
    assert result.instances == [(instance.id, instance.name)], result
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
    history = _history(instance.id)
    path = [(frm, to) for kind, frm, to, _ in history if kind == "decommission"]
    expected = {
        Status.DELETE_PENDING: [],
        Status.DELETING: [],
    }.get(status, [(status, "delete_pending")])
    if status != Status.DELETING:
        expected = [*expected, ("delete_pending", "deleting")]
    assert path == expected, history
    assert all(DECOMMISSIONED in message for kind, *_, message in history), history
    assert history[-1][0] == "ContainerDeleted", history


def test_decommission_supersedes_the_waiting_requests_and_leaves_a_running_one_to_its_worker(
    engines_asked,
):
    (runtime,) = _runtimes("gone")
    instance = _placed(InstanceFactory(runtime=runtime), Status.STOP_PENDING)
    waiting = RequestFactory(instance=instance, kind="ContainerStopRequest")
    deferred = RequestFactory(instance=instance, outcome="deferred")
    held = RequestFactory(instance=instance, status="processing", claim_token=uuid.uuid4())
    result = runtime_decommission(runtime_id=runtime.pk, actor="user:op")
    rows = {
        row.pk: (row.status, row.outcome, row.last_error)
        for row in OutboxEvent.objects.filter(pk__in=[waiting.pk, deferred.pk, held.pk])
    }
    gone = ("sent", "superseded", f"{DECOMMISSIONED}: runtime gone")
    assert rows[waiting.pk] == gone and rows[deferred.pk] == gone, rows
    assert rows[held.pk][:2] == ("processing", ""), rows
    assert result.superseded == 2, result
    # The worker that holds it finds no instance: superseded, and no engine asked.
    assert handle_create(OutboxEvent.objects.get(pk=held.pk)) == Outcome.SUPERSEDED
    assert engines_asked == []


def test_decommission_cordons_disables_fails_its_dag_runs_and_lets_the_row_be_deleted(
    owner, engines_asked
):
    (runtime,) = _runtimes("gone")
    instance = _placed(InstanceFactory(runtime=runtime, owner=owner), Status.RUNNING)
    run = DagRun.objects.create(
        template_name="pipeline", owner=owner, graph=[{"key": "a", "depends_on": []}],
        runtime=runtime,
    )  # fmt: skip
    DagRun.objects.filter(pk=run.pk).update(status="running")
    node = DagNodeRun.objects.create(run=run, key="a", instance_id=instance.id, attempt=1)
    DagNodeRun.objects.filter(pk=node.pk).update(status="running")
    with pytest.raises(ProtectedError):
        Runtime.objects.get(pk=runtime.pk).delete()  # today's protection, before

    result = runtime_decommission(runtime_id=runtime.pk, actor="user:op")

    row = Runtime.objects.get(pk=runtime.pk)
    state = (row.cordoned, row.enabled, row.decommissioned_at is not None)
    assert state == (True, False, True), vars(row)
    run.refresh_from_db()
    node.refresh_from_db()
    assert (run.status, run.reason, run.runtime_id) == ("failed", DECOMMISSIONED, None), (
        run.status,
        run.reason,
        run.runtime_id,
    )
    assert (node.status, node.reason) == ("failed", DECOMMISSIONED), (node.status, node.reason)
    assert DagEvent.objects.filter(run_id=run.id, kind="runtime_released").exists()
    assert result.others == [f"DAG run {run} failed: {DECOMMISSIONED}"], result.others
    dag_run_advance(run_id=str(run.id))  # the runner's cleanup of the failed run
    assert engines_asked == []
    row.delete()
    assert not Runtime.objects.filter(pk=runtime.pk).exists()
    # the engine's history stays, under its name
    history = RuntimeEvent.objects.filter(runtime_id=runtime.pk).order_by("id")
    shown = [(e.runtime_name, e.kind, e.actor, e.from_status, e.to_status) for e in history]
    assert shown == [
        ("gone", "engine.decommissioning", "user:op", "open", "cordoned"),
        ("gone", "engine.decommissioned", "user:op", "cordoned", "decommissioned"),
    ], shown
    assert history[1].data["instances"] == 1, history[1].data


def test_a_decommissioned_runtime_cannot_be_switched_on_again(engines_asked):
    (runtime,) = _runtimes("gone")
    runtime_decommission(runtime_id=runtime.pk, actor="user:op")

    with pytest.raises(InvalidRuntime, match="decommissioned on .* add the engine as a new"):
        runtime_update(runtime_id=runtime.pk, actor="user:op", enabled=True)

    row = Runtime.objects.get(pk=runtime.pk)
    assert (row.enabled, row.cordoned) == (False, True), vars(row)
    kinds = list(RuntimeEvent.objects.filter(runtime_id=runtime.pk).values_list("kind", flat=True))
    assert "engine.enabled" not in kinds, kinds
    assert engines_asked == []


def test_decommission_leaves_other_engines_instances_alone_and_a_repeat_changes_nothing():
    gone, kept = _runtimes("gone", "kept")
    other = _placed(InstanceFactory(runtime=kept), Status.RUNNING)
    _placed(InstanceFactory(runtime=gone), Status.RUNNING)
    runtime_decommission(runtime_id=gone.pk, actor="user:op")
    again = runtime_decommission(runtime_id=gone.pk, actor="user:op")
    assert (again.instances, again.superseded, again.others) == ([], 0, []), again
    row = ContainerInstance.objects.get(pk=other.pk)
    assert (row.status, row.runtime_id) == ("running", kept.pk), (row.status, row.runtime_id)
    assert runtime_uncordon(runtime_id=gone.pk, actor="user:op").cordoned is True


def test_the_preview_lists_instances_their_containers_and_the_dag_runs_placed_there(owner):
    (runtime,) = _runtimes("gone")
    made = _placed(InstanceFactory(runtime=runtime, container_id="abc123"), Status.RUNNING)
    never = _placed(InstanceFactory(runtime=runtime), Status.PENDING)
    run = DagRun.objects.create(template_name="nightly", owner=owner, runtime=runtime)
    preview = runtime_decommission_preview(runtime_id=runtime.pk)
    listed = [(i.id, i.container_name, i.container_id, i.status) for i in preview.instances]
    assert listed == [
        (made.id, f"gb-{made.id}", "abc123", "running"),
        (never.id, f"gb-{never.id}", "", "pending"),
    ], listed
    assert preview.others == [f"DAG run {run} (pending)"], preview.others
    assert ContainerInstance.objects.filter(runtime=runtime).count() == 2  # reads only
