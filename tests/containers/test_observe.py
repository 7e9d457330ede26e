"""contract §5 as pure mapping: what the engine says → the instance's state."""

from __future__ import annotations

import pytest

from containers.engines.base import ContainerState
from containers.execution.observe import REMOVED_OUTSIDE, Observation, apply_observation, target_for
from containers.models import ContainerEvent, ContainerInstance
from tests.factories import InstanceFactory


def engine(status: str, exit_code: int | None = None, oom: bool = False) -> ContainerState:
    return ContainerState(
        runtime_id="c1", name="gb-x", status=status, exit_code=exit_code, oom_killed=oom
    )


@pytest.mark.parametrize(
    ("state", "current", "memory_limited", "target", "reason"),
    [
        (engine("running"), "creating", False, "running", ""),
        (engine("paused"), "running", False, "paused", ""),
        (engine("exited", 0), "running", False, "stopped", ""),
        (engine("exited", 3), "running", False, "failed", "exited with code 3"),
        (engine("exited", 137), "stopping", False, "stopped", ""),  # we asked it to stop
        (engine("exited", 143), "stop_pending", False, "stopped", ""),
        (engine("exited", 137, oom=True), "running", False, "failed", "OOMKilled"),
        (engine("exited", 137), "running", True, "failed", "OOMKilled"),  # flag missed
        (engine("exited", 137), "running", False, "failed", "exited with code 137"),
        (None, "running", False, "failed", REMOVED_OUTSIDE),
    ],
)
def test_target_for(state, current, memory_limited, target, reason):
    observation = target_for(state, current, memory_limited=memory_limited)
    assert observation.target == target
    assert reason in observation.reason


def test_a_created_container_not_yet_started_says_nothing_new():
    assert target_for(engine("created"), "creating") is None


def _in(state: str) -> ContainerInstance:
    instance = InstanceFactory()
    ContainerInstance.objects.filter(pk=instance.pk).update(status=state)
    return ContainerInstance.objects.get(pk=instance.pk)


def _steps(instance) -> list[tuple[str, str]]:
    rows = ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id")
    return [(row.from_status, row.to_status) for row in rows]


@pytest.mark.django_db
def test_started_and_exited_while_starting_takes_the_shortest_true_path():
    instance = _in("starting")
    observation = Observation("stopped", exit_code=0, started=True)
    assert apply_observation(instance, observation, actor="t") is True
    assert _steps(instance) == [("starting", "running"), ("running", "stopped")]
    assert ContainerInstance.objects.get(pk=instance.pk).exit_code == 0


@pytest.mark.django_db
def test_a_stopped_instance_whose_container_vanished_stays_stopped_and_marked_missing():
    instance = _in("stopped")
    assert apply_observation(instance, target_for(None, "stopped"), actor="t") is False
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.runtime_missing) == ("stopped", True)
    [(before, after)] = _steps(instance)
    assert before == after == "stopped"
    assert REMOVED_OUTSIDE in ContainerEvent.objects.get(instance_id=instance.pk).message


@pytest.mark.django_db
def test_a_move_with_no_true_path_keeps_the_state_and_says_why():
    instance = _in("delete_pending")
    observation = Observation("paused", started=True)
    assert apply_observation(instance, observation, actor="t") is False
    assert ContainerInstance.objects.get(pk=instance.pk).status == "delete_pending"
    assert "kept delete_pending" in ContainerEvent.objects.get(instance_id=instance.pk).message
