"""DAG runs across a crash of every process, and at scale (contract §7, real engine)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal

import pytest
from django.db.models.functions import Now

from containers.models import ContainerEvent, ContainerInstance
from containers.requests.slots import slot_count
from outbox.liveness import DISPATCHER
from outbox.models import DispatcherBeat
from tests.processes import App, descendants, sampling, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

KEEP = {
    "container_delete_container_on_node_success": "false",
    "container_dag_node_cleanup_on_dag_finished": "none",
}
COLD = dt.timedelta(seconds=10 * 0.2)  # ten poll intervals of the test config


def kill_everything(app: App) -> None:
    """SIGKILL every process of the app and all their children: a crash, not a stop."""
    for name in list(app.processes):
        process = app.processes.pop(name)
        pids = [process.pid, *descendants(process.pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
        process.log.close()


def start_everything(app: App) -> None:
    """Every process, and the dispatcher's start decided (warm or cold, its cold-start
    callbacks run: one transaction with its mark), so a run started next is not judged
    by it as one that was running before the start."""
    app.dispatcher()
    app.cluster("create")
    app.cluster("control")
    app.monitor()
    wait_for(
        lambda: DispatcherBeat.objects.filter(kind=DISPATCHER, beat_at__gte=Now() - COLD).exists(),
        timeout=60,
        message="the dispatcher's start recorded",
    )


def wait_until_cold() -> None:
    """No dispatcher has been alive for ten poll intervals (on the database's clock)."""
    wait_for(
        lambda: not DispatcherBeat.objects.filter(beat_at__gte=Now() - COLD).exists(),
        timeout=30,
        message="every dispatcher's mark older than ten poll intervals",
    )


def test_a_crash_of_every_process_is_recovered_and_a_stale_container_removed_first(dags):
    """b runs when everything is killed; meanwhile b's instance row is lost (as after a
    restore from a backup older than its create): the one way a crash leaves a node
    container with no instance. At the cold start the run goes on from stored state."""
    b = "if [ -f /dag/b-once ]; then exit 0; fi; touch /dag/b-once; sleep 600"
    with dags.dock.app(**KEEP, container_recover_running_dag_on_start="true") as app:
        start_everything(app)
        run = dags.start(
            [
                {"key": "a", "command": ["true"]},
                {"key": "b", "command": ["sh", "-c", b], "depends_on": ["a"], "retries": 1},
                {"key": "c", "command": ["true"], "depends_on": ["b"]},
            ]
        )
        dags.instances_reach(run, "running", "b")
        kill_everything(app)
        stale = dags.containers(run)["b"][0]["Id"]
        ContainerInstance.objects.filter(id=dags.nodes(run)["b"].instance_id).delete()
        wait_until_cold()
        start_everything(app)
        run = dags.ends(run, "succeeded")
    nodes = dags.nodes(run)
    assert {k: (n.status, n.attempt) for k, n in nodes.items()} == {
        "a": ("succeeded", 1),  # never ran again
        "b": ("succeeded", 2),
        "c": ("succeeded", 1),
    }, dags.describe(run)
    assert any(e.message == "its instance vanished" for e in dags.events(run, "b"))
    containers = dags.containers(run)
    assert {k: len(v) for k, v in containers.items()} == {"a": 1, "b": 1, "c": 1}
    assert stale not in {c["Id"] for c in containers["b"]}
    removed = ContainerEvent.objects.get(kind="cleanup", message__contains=stale[:12])
    created = ContainerEvent.objects.get(
        instance_id=nodes["b"].instance_id, kind__contains="Create"
    )
    assert removed.id < created.id  # removed before b ran again
    assert any(e.kind == "recover" for e in dags.events(run))


def test_without_recovery_a_crash_fails_the_run_with_the_reason_and_cleans_up(dags):
    with dags.dock.app(container_recover_running_dag_on_start="false") as app:
        start_everything(app)
        run = dags.start(
            [
                {"key": "a", "command": ["sleep", "600"]},
                {"key": "b", "command": ["true"], "depends_on": ["a"]},
            ]
        )
        dags.instances_reach(run, "running", "a")
        kill_everything(app)
        wait_until_cold()
        start_everything(app)
        run = dags.ends(run, "failed")
        # dag_node_cleanup_on_dag_finished: delete (the default) removes it all.
        wait_for(
            lambda: not dags.containers(run) and not dags.volume_exists(run),
            timeout=60,
            message="containers and workspace removed",
            describe=lambda: dags.describe(run),
        )
    assert run.reason == "not recovered at start"
    nodes = dags.nodes(run)
    assert {k: (n.status, n.reason) for k, n in nodes.items()} == {
        "a": ("failed", "not recovered at start"),
        "b": ("skipped", "not recovered at start"),
    }
    assert not ContainerInstance.objects.filter(id=nodes["a"].instance_id).exists()


def test_a_12_node_fan_out_never_holds_more_than_3_slots_and_all_succeed(dags):
    with (
        dags.dock.pipeline(container_create_queue_max_concurrency="3"),
        sampling(slot_count, interval=0.005) as samples,
    ):
        run = dags.start([{"key": f"n{i:02}", "command": ["true"]} for i in range(12)])
        run = dags.ends(run, "succeeded", timeout=180)
    assert {n.status for n in dags.nodes(run).values()} == {"succeeded"}, dags.describe(run)
    assert max(samples) <= 3, max(samples)
    assert max(samples) >= 1  # the sampler did see creates under way


def test_a_20_node_run_against_max_pending_5_waits_and_no_node_fails(dags):
    with dags.dock.app(container_create_queue_max_pending="5") as app:
        app.dispatcher()
        app.cluster("control")
        app.monitor()
        run = dags.start([{"key": f"n{i:02}", "command": ["true"]} for i in range(20)])
        # No create worker yet: the queue fills to maxPending and the rest wait, ready.
        wait_for(
            lambda: (
                sorted(n.status for n in dags.nodes(run).values())
                == ["ready"] * 15 + ["running"] * 5
            ),
            timeout=60,
            message="5 queued, 15 ready",
            describe=lambda: dags.describe(run),
        )
        assert ContainerInstance.objects.filter(status="pending").count() == 5
        app.cluster("create")
        run = dags.ends(run, "succeeded", timeout=240)
    nodes = dags.nodes(run)
    assert {(n.status, n.attempt) for n in nodes.values()} == {("succeeded", 1)}
    assert not any(e.to_status == "failed" for e in dags.events(run))
