"""The emulator and the fake kubelet in a process of their own (``ClusterProcess``, what
``bench/kubernetes.py`` drives): reached by the official client as in-process, a Pod
run and finished on command, the child's own time reported, and ended with its pipe."""

from __future__ import annotations

import time

import pytest
from kubernetes import client, config, watch

from tests.kube.process import ClusterError, ClusterProcess

NAMESPACE = "gobrave-process"
DEADLINE = 10  # seconds: a Pod not in its phase by then fails the test, with the Pod printed


def phase_reached(core: client.CoreV1Api, name: str, phase: str) -> client.V1Pod:
    """Wait (on a watch, not a clock) until Pod ``name`` is in ``phase``."""
    current = core.read_namespaced_pod(name, NAMESPACE)
    if current.status.phase == phase:
        return current
    for event in watch.Watch().stream(
        core.list_namespaced_pod, NAMESPACE, field_selector=f"metadata.name={name}",
        resource_version=current.metadata.resource_version, timeout_seconds=DEADLINE,
    ):  # fmt: skip
        current = event["object"]
        if current.status.phase == phase:
            return current
    pytest.fail(f"Pod {name} never {phase}; it says: {current.status}")


def test_a_cluster_in_its_own_process_runs_and_finishes_pods_and_reports_its_own_time(tmp_path):
    """Its answers: the Pods' times (made, Running, each status write of ``finish``) on
    the wall clock both processes share, its busy and CPU seconds, its refusals."""
    cluster = ClusterProcess(tmp_path).start()
    try:
        cluster.create_namespace(NAMESPACE)
        context = cluster.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
        assert cluster.url.startswith("https://127.0.0.1:")
        before = cluster.seconds()
        with config.new_client_from_config(str(tmp_path / "kubeconfig"), context) as api:
            core = client.CoreV1Api(api)
            for name in ("one", "two"):
                asked = time.time()
                core.create_namespaced_pod(NAMESPACE, {
                    "metadata": {"name": name},
                    "spec": {"containers": [{"name": "main", "image": "busybox:1"}],
                             "restartPolicy": "Never"},
                })  # fmt: skip
                phase_reached(core, name, "Running")
                times = cluster.pod_times(NAMESPACE, name)
                assert asked <= times["made"] <= times["running"] <= time.time(), (asked, times)
            asked = time.time()
            written = cluster.finish(NAMESPACE, ["one", "two"], 3)
            answered = time.time()
            assert list(written) == ["one", "two"]
            assert asked <= written["one"] <= written["two"] <= answered, (asked, written)
            for name in ("one", "two"):
                pod = phase_reached(core, name, "Failed")
                state = pod.status.container_statuses[0].state
                assert state.terminated.exit_code == 3, state
        after = cluster.seconds()
        assert after["busy"] > before["busy"] and after["kubelet"] > before["kubelet"], after
        assert after["cpu"] >= after["emulator_cpu"] > before["emulator_cpu"], (before, after)
        with pytest.raises(ClusterError, match="already exists"):
            cluster.create_namespace(NAMESPACE)  # the child's refusal, raised here
        process = cluster._proc
    finally:
        cluster.stop()
    assert process is not None and process.returncode == 0, process.returncode


def test_the_child_takes_the_switch_interval_it_is_given(tmp_path):
    default = ClusterProcess(tmp_path / "a")
    given = ClusterProcess(tmp_path / "b", switch_interval=0.0005)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        default.start()
        given.start()
        assert default.switch_interval_in_use() == pytest.approx(0.005)
        assert given.switch_interval_in_use() == pytest.approx(0.0005)
    finally:
        default.stop()
        given.stop()
