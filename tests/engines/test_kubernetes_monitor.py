"""The monitor's follower on a Kubernetes runtime (the bench does the same at scale,
bench/kubernetes.py): a Pod's exit reaches its instance through the watch alone (no
reconcile runs), the cursor is a ``resourceVersion``, and after the API server drops its
watches the follower opens a new one from its cursor and a later exit still arrives.

On ``kube``: the API emulator and fake kubelet of ``tests/kube``.
"""

from __future__ import annotations

import pytest

from containers.engines.labels import LABEL_INSTANCE
from tests.processes import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def kube_runtime(kube):
    return kube.runtime_row("kube-followed")


def _running(kube, owner, name: str):
    """An instance whose Pod runs until ``kubelet.trigger`` ends it with exit code 3
    (brought to ``running`` by reconcile passes: the follower is not started yet)."""
    from containers.execution.reconciler import reconcile
    from containers.models import ContainerInstance
    from containers.requests.services import container_create_by_template
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    template = TemplateFactory(name=name, constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    kube.kubelet.add_rule(labels={LABEL_INSTANCE: str(instance.pk)}, exit_code=3, on_trigger=True)
    assert relay_drain() == ["sent"]

    def running():
        reconcile()
        row = ContainerInstance.objects.get(pk=instance.pk)
        return row if row.status == "running" else None

    return wait_for(running, timeout=10, message=f"{name} running")


def _failed_by_the_monitor(row) -> None:
    from containers.models import ContainerEvent, ContainerInstance

    def failed():
        return ContainerInstance.objects.filter(pk=row.pk, status="failed").first()

    wait_for(
        failed,
        timeout=10,
        message=f"{row.name} failed",
        describe=lambda: str(ContainerInstance.objects.values("status", "status_reason").get(
            pk=row.pk
        )),
    )  # fmt: skip
    entry = ContainerEvent.objects.get(instance_id=row.pk, to_status="failed")
    said = (entry.actor, entry.message, entry.data)
    assert entry.actor == "monitor" and entry.message == "exited with code 3", said
    assert entry.data.get("event") == "die", said


def test_the_follower_applies_pod_exits_and_resumes_from_its_resource_version_after_a_drop(
    kube, kube_runtime, owner
):
    from containers.execution.monitor import Follower, Monitor, cursor_for
    from tests.engines.test_kubernetes import raw_pod

    first = _running(kube, owner, "followed-1")
    second = _running(kube, owner, "followed-2")
    monitor = Monitor(backoff_cap=0.05)
    follower = Follower(monitor, kube_runtime)

    def watches() -> int:
        return sum(call.verb == "watch" for call in kube.emulator.calls)

    follower.thread.start()
    try:
        wait_for(lambda: watches() == 1, timeout=10, message="the follower's watch open")
        kube.kubelet.trigger(kube.namespace, first.container_name)
        _failed_by_the_monitor(first)
        exited_at = raw_pod(kube, first.container_name)["metadata"]["resourceVersion"]
        wait_for(
            lambda: follower.cursor.position == exited_at,
            timeout=10,
            message="the cursor at the exit's resourceVersion",
            describe=lambda: f"cursor {follower.cursor.position}, Pod at {exited_at}",
        )
        kube.emulator.drop_watches()
        # Most likely while no watch is open (the follower waits a second to reconnect):
        # then only the resume from the cursor brings it. Either way it must arrive.
        kube.kubelet.trigger(kube.namespace, second.container_name)
        wait_for(lambda: watches() == 2, timeout=10, message="a watch opened again")
        stored = cursor_for(kube_runtime).position  # stored when the dropped stream ended
        assert stored.isdigit() and int(stored) >= int(exited_at), (stored, exited_at)
        _failed_by_the_monitor(second)
    finally:
        monitor.stop()
        kube.emulator.drop_watches()  # the follower's open watch ends: its thread too
        follower.thread.join(timeout=10)
    assert not follower.thread.is_alive()
    [watch, again] = [call for call in kube.emulator.calls if call.verb == "watch"]
    assert watch == again and watch.namespace == kube.namespace, (watch, again)
