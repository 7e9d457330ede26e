"""Lifecycle policies on the real Docker Engine, through the real processes: the monitor's
policy pass makes ordinary stop and delete requests with the actor ``policy``, which the
dispatcher and the control cluster carry out (docs/operations.md, "Policies").

One pipeline (dispatcher, both clusters, monitor; the pass every 0.3 s) runs every rule
at once, on instances of their own, so the whole costs one pipeline's start and the
longest rule's wait (the tests' time budget: docs/benchmarks.md).
"""

from __future__ import annotations

import pytest

from containers.models import ContainerEvent, ContainerInstance, Workspace
from outbox.models import OutboxEvent
from tests.containers.conftest import EXIT_ON_TERM
from tests.containers.test_docker_lifecycle import create, reaches
from tests.factories import UserFactory
from tests.processes import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

POLICIES = {"container_policies__interval": "0.3", "container_policies__workspace_retention": "1"}
BUSY = "trap 'exit 0' TERM; while true; do :; done"  # a CPU loop
IDLE = 2  # idle_timeout of the idle and busy instances
# Their idle_cpu_threshold: a sleep uses no CPU at all, and a loop on a loaded machine
# may get a few hundredths of a core (0.02 measured beside ten other loops), never none.
THRESHOLD = 0.001


def history(instance_id) -> list[tuple[str, str, str]]:
    rows = ContainerEvent.objects.filter(instance_id=instance_id).order_by("id")
    return [(r.kind, r.actor, r.message) for r in rows]


def by_policy(instance_id) -> list[str]:
    return [message for _, actor, message in history(instance_id) if actor == "policy"]


def test_the_policy_pass_stops_deletes_culls_and_retires_through_the_outbox(dock, owner):
    """max_lifetime stops one instance, delete_stopped_after then deletes it and
    workspace_retention removes its owner's workspace; an idle container (sleep) is
    culled and a busy one (a CPU loop) is not."""
    brief = UserFactory(username="brief")
    limited = dock.template(
        EXIT_ON_TERM,
        max_lifetime=2,
        delete_stopped_after=1,
        volumes=[{"source": "$WORKSPACE_PATH", "target": "/work"}],
    )
    sleeper = dock.template(["sleep", "1000"], idle_timeout=IDLE, idle_cpu_threshold=THRESHOLD)
    looper = dock.template(BUSY, idle_timeout=IDLE, idle_cpu_threshold=THRESHOLD)
    with dock.pipeline(**POLICIES):
        timed = create(limited, brief)
        busy = create(looper, owner, name="busy")
        idle = create(sleeper, owner, name="idle")
        reaches(timed, "running", timeout=60)
        [workspace] = Workspace.objects.filter(owner=brief)
        reaches(busy, "running", timeout=60)
        reaches(idle, "stopped", timeout=60)
        wait_for(
            lambda: not ContainerInstance.objects.filter(pk=timed.pk).exists(),
            timeout=60,
            message="the policy stops, then deletes the time-limited instance",
            describe=lambda: f"{history(timed.pk)}",
        )
        wait_for(
            lambda: not dock.client.volumes(filters={"name": workspace.source}).get("Volumes"),
            timeout=30,
            message=f"workspace_retention removes {workspace.source}",
            describe=lambda: f"{list(Workspace.objects.values())}",
        )
        started = ContainerInstance.objects.get(pk=busy.pk).started_at.timestamp()

        def busy_sampled_past_the_timeout() -> bool:
            row = ContainerInstance.objects.get(pk=busy.pk)
            sample = row.cpu_sample or {}
            return row.status != "running" or sample.get("read_at", 0) > started + IDLE + 1

        wait_for(busy_sampled_past_the_timeout, timeout=60, message="the busy one sampled")
        row = ContainerInstance.objects.get(pk=busy.pk)
        assert row.status == "running", history(busy.pk)
        assert row.idle_since > row.started_at  # measured busy since it started
    stops = OutboxEvent.objects.filter(aggregate_id=str(timed.pk), kind="ContainerStopRequest")
    assert [row.payload["by"] for row in stops] == ["policy"]
    messages = by_policy(timed.pk)
    assert any("max_lifetime: running longer than 2s" in m for m in messages), history(timed.pk)
    assert any("delete_stopped_after: stopped for longer than 1s" in m for m in messages), history(
        timed.pk
    )
    assert not Workspace.objects.filter(pk=workspace.pk).exists()
    [culled] = by_policy(idle.pk)
    assert f"idle_timeout: used less than {THRESHOLD} cores for 2s" in culled
    assert by_policy(busy.pk) == []
