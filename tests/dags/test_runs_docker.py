"""DAG runs on the real Docker Engine, through the real processes (contract §7)."""

from __future__ import annotations

import pytest

from containers.models import ContainerInstance, Workspace
from dags.services import dag_run_cancel, dag_run_retry_failed
from tests.engine_events import created, creations
from tests.processes import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

KEEP = {
    "container_delete_container_on_node_success": "false",
    "container_dag_node_cleanup_on_dag_finished": "none",
    "container_dag_node_cleanup_on_failed": "none",
}


def test_diamond_runs_d_after_b_and_c_and_d_reads_what_a_wrote(dags):
    with creations(dags.dock.client) as seen, dags.dock.pipeline(**KEEP):
        run = dags.start(
            [
                {"key": "a", "command": ["sh", "-c", "echo from-a > /dag/a.txt"]},
                {"key": "b", "command": ["sleep", "1"], "depends_on": ["a"]},
                {"key": "c", "command": ["true"], "depends_on": ["a"]},
                {
                    "key": "d",
                    "command": [
                        "sh",
                        "-c",
                        'test "$(cat /dag/a.txt)" = from-a && test "$DAG_NODE" = d',
                    ],
                    "depends_on": ["b", "c"],
                },
            ]
        )
        dags.ends(run, "succeeded")
    nodes = dags.nodes(run)
    assert {k: (n.status, n.exit_code, n.attempt) for k, n in nodes.items()} == {
        key: ("succeeded", 0, 1) for key in "abcd"
    }, dags.describe(run)
    containers = dags.containers(run)
    states = {
        key: dags.dock.client.inspect_container(found[0]["Id"])["State"]
        for key, found in containers.items()
    }
    assert set(states) == set("abcd")
    assert all(s["ExitCode"] == 0 and s["Status"] == "exited" for s in states.values()), states
    assert states["d"]["StartedAt"] > states["b"]["FinishedAt"]
    assert states["d"]["StartedAt"] > states["c"]["FinishedAt"]
    assert states["b"]["StartedAt"] > states["a"]["FinishedAt"]
    env = dags.dock.client.inspect_container(containers["d"][0]["Id"])["Config"]["Env"]
    assert f"DAG_RUN_ID={run.pk}" in env and "DAG_NODE=d" in env
    # The run's volume was made writable once, by the first node's worker, not per node.
    helpers = created(seen, **{"io.gobrave.workspace": run.workspace_name})
    assert len(helpers) == 1, helpers


def test_retry_failed_after_the_workspace_was_removed_writes_to_a_fresh_one(dags):
    """Under ``dag_node_cleanup_on_dag_finished: delete`` the failed run's volume (and
    gobrave's record of it) is gone; the re-run's node must get a new, writable one."""
    write_then_fail = "touch /dag/x && exit 3"  # exit 1 if /dag is not writable
    with (
        creations(dags.dock.client) as seen,
        dags.dock.pipeline(container_dag_node_cleanup_on_dag_finished="delete"),
    ):
        run = dags.start([{"key": "w", "command": ["sh", "-c", write_then_fail]}])
        run = dags.ends(run, "failed")
        wait_for(lambda: not dags.volume_exists(run), timeout=60, message="volume removed")
        assert not Workspace.objects.filter(source=run.workspace_name).exists()
        dag_run_retry_failed(run_id=run.pk, actor="test")
        wait_for(
            lambda: dags.nodes(run)["w"].attempt == 2 and dags.nodes(run)["w"].status == "failed",
            timeout=120,
            message="the re-run's node failed",
            describe=lambda: dags.describe(run),
        )
    node = dags.nodes(run)["w"]
    assert (node.exit_code, node.reason) == (3, "exited with code 3"), dags.describe(run)
    helpers = created(seen, **{"io.gobrave.workspace": run.workspace_name})
    assert len(helpers) == 2, helpers


FAILING = [
    {"key": "a", "command": ["true"]},
    {"key": "bad", "command": ["sh", "-c", "exit 3"], "depends_on": ["a"]},
    {"key": "below", "command": ["true"], "depends_on": ["bad"]},
    {"key": "side", "command": ["sleep", "1"], "depends_on": ["a"]},
]


@pytest.mark.parametrize(
    ("on_failed", "at_end"),
    [("none", "none"), ("stop", "stop"), ("delete", "none"), ("none", "delete")],
)
def test_a_failing_node_skips_below_lets_its_sibling_finish_and_cleans_up_by_policy(
    dags, on_failed, at_end
):
    with dags.dock.pipeline(
        container_dag_node_cleanup_on_failed=on_failed,
        container_dag_node_cleanup_on_dag_finished=at_end,
    ):
        run = dags.start([dict(n) for n in FAILING])
        run = dags.ends(run, "failed")
        dags.settled(run)
        if at_end == "delete":
            wait_for(lambda: not dags.volume_exists(run), timeout=30, message="volume removed")
    nodes = dags.nodes(run)
    assert {k: n.status for k, n in nodes.items()} == {
        "a": "succeeded",
        "bad": "failed",
        "below": "skipped",
        "side": "succeeded",
    }, dags.describe(run)
    assert nodes["bad"].exit_code == 3
    assert run.reason == "node bad failed: exited with code 3"
    assert "upstream bad failed" in nodes["below"].reason
    containers = dags.containers(run)
    # delete_container_on_node_success (true by default): succeeded nodes leave nothing.
    kept = {"none": {"bad"}, "stop": {"bad"}, "delete": set()}[on_failed]
    if at_end == "delete":
        kept = set()
    assert set(containers) == kept, containers
    for found in containers.values():
        assert [c["State"] for c in found] == ["exited"]
    instances = ContainerInstance.objects.filter(id=nodes["bad"].instance_id)
    assert instances.exists() == bool(kept), list(instances.values("status"))
    assert dags.volume_exists(run) == (at_end != "delete")


def test_a_node_failing_once_with_one_retry_succeeds_on_its_second_instance(dags):
    flaky = "if [ -f /dag/seen ]; then exit 0; fi; touch /dag/seen; exit 3"
    with dags.dock.pipeline(**KEEP):
        run = dags.start([{"key": "flaky", "command": ["sh", "-c", flaky], "retries": 1}])
        dags.ends(run, "succeeded")
    node = dags.nodes(run)["flaky"]
    assert (node.status, node.attempt, node.tries) == ("succeeded", 2, 2), dags.describe(run)
    found = dags.containers(run)["flaky"]
    assert len(found) == 2, found
    codes = sorted(dags.dock.client.inspect_container(c["Id"])["State"]["ExitCode"] for c in found)
    assert codes == [0, 3]
    moves = [(e.from_status, e.to_status) for e in dags.events(run, "flaky")]
    assert moves == [
        ("waiting", "ready"),
        ("ready", "running"),
        ("running", "failed"),
        ("failed", "ready"),
        ("ready", "running"),
        ("running", "succeeded"),
    ]


def test_retry_failed_reruns_only_the_failed_and_skipped_nodes(dags):
    once = "if [ -f /dag/seen ]; then exit 0; fi; touch /dag/seen; exit 3"
    with dags.dock.pipeline(**KEEP):
        run = dags.start(
            [
                {"key": "a", "command": ["true"]},
                {"key": "bad", "command": ["sh", "-c", once], "depends_on": ["a"]},
                {"key": "below", "command": ["true"], "depends_on": ["bad"]},
                {"key": "side", "command": ["true"], "depends_on": ["a"]},
            ]
        )
        dags.ends(run, "failed")
        dag_run_retry_failed(run_id=run.pk, actor="test")
        dags.ends(run, "succeeded")
    nodes = dags.nodes(run)
    attempts = {k: (n.status, n.attempt) for k, n in nodes.items()}
    assert attempts == {
        "a": ("succeeded", 1),
        "bad": ("succeeded", 2),
        "below": ("succeeded", 1),
        "side": ("succeeded", 1),
    }, dags.describe(run)
    assert {k: len(v) for k, v in dags.containers(run).items()} == {
        "a": 1,
        "bad": 2,
        "below": 1,
        "side": 1,
    }


def test_cancel_deletes_a_queued_create_stops_a_running_node_and_cancels_the_rest(dags):
    with dags.dock.pipeline(**KEEP) as app:
        run = dags.start(
            [
                {"key": "long", "command": ["sleep", "600"]},
                {"key": "after", "command": ["true"], "depends_on": ["long"]},
                {"key": "quick", "command": ["sleep", "2"]},
                {"key": "late", "command": ["true"], "depends_on": ["quick"]},
            ]
        )
        dags.instances_reach(run, "running", "long", "quick")
        app.stop("create-cluster")  # late's create will stay queued
        dags.instances_reach(run, "pending", "late")
        late = dags.instance(run, "late")
        dag_run_cancel(run_id=run.pk, actor="test")
        app.cluster("create")  # the queued create is now superseded by its delete
        dags.ends(run, "cancelled")
        dags.settled(run)
    nodes = dags.nodes(run)
    assert {k: n.status for k, n in nodes.items()} == {
        "long": "cancelled",
        "after": "cancelled",
        "quick": "succeeded",
        "late": "cancelled",
    }, dags.describe(run)
    assert not ContainerInstance.objects.filter(id=late.id).exists()
    containers = dags.containers(run)
    assert "late" not in containers  # never made
    assert ContainerInstance.objects.get(id=nodes["long"].instance_id).status == "stopped"
    assert [c["State"] for c in containers["long"]] == ["exited"]


def test_a_user_deleting_a_node_instance_fails_the_node_and_a_bad_spec_fails_at_once(dags):
    bad_volume = dags.dock.template(["true"], volumes=[{"source": "/etc", "target": "/host-etc"}])
    with dags.dock.pipeline(**KEEP):
        run = dags.start(
            [
                {"key": "victim", "command": ["sleep", "600"]},
                {"key": "below", "command": ["true"], "depends_on": ["victim"]},
                {"key": "other", "command": ["sleep", "1"]},
                {"key": "refused", "template": bad_volume.name},
            ]
        )
        # The victim's instance runs once its create commits (the advance's first
        # transaction); the refused node fails in a later one of the same advance: wait
        # for both.
        wait_for(
            lambda: (
                ContainerInstance.objects.filter(
                    id=dags.nodes(run)["victim"].instance_id, status="running"
                ).exists()
                and dags.nodes(run)["refused"].status == "failed"
            ),
            timeout=60,
            message="victim running, refused failed",
            describe=lambda: dags.describe(run),
        )
        refused = dags.nodes(run)["refused"]
        assert refused.status == "failed", dags.describe(run)
        # Users hear which volume was refused, never the host path (contract §8).
        assert "create refused" in refused.reason and "volumes[0]" in refused.reason
        assert "/etc" not in refused.reason.replace("/host-etc", "")
        from containers.requests.services import container_delete

        container_delete(instance_id=dags.nodes(run)["victim"].instance_id, actor="bob")
        run = dags.ends(run, "failed")
    nodes = dags.nodes(run)
    assert {k: n.status for k, n in nodes.items()} == {
        "victim": "failed",
        "below": "skipped",
        "other": "succeeded",
        "refused": "failed",
    }, dags.describe(run)
    assert nodes["victim"].reason == "a delete of its instance was requested by bob"
