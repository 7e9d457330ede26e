"""What the engine says, applied to an instance (contract §5).

``target_for`` maps an observed container state to the instance state it implies (pure,
unit-tested); ``apply_observation`` moves the instance there by the shortest path that is
true to what happened, or keeps its state and records why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from containers.engines.base import ContainerState
from containers.models import ContainerInstance
from containers.requests.lifecycle import move, record
from containers.states import Status, can_move

REMOVED_OUTSIDE = "removed outside gobrave"
OOM_KILLED = "OOMKilled"
SIGKILLED = 137  # 128 + SIGKILL: the kernel's OOM killer, or a kill -9
ASKED_TO_STOP = frozenset(
    {Status.STOP_PENDING, Status.STOPPING, Status.DELETE_PENDING, Status.DELETING}
)


@dataclass(frozen=True)
class Observation:
    target: str
    reason: str = ""
    exit_code: int | None = None
    started: bool = False  # the container did run (so "running" is a true step)


def target_for(
    state: ContainerState | None, current: str, *, memory_limited: bool = False
) -> Observation | None:
    """The state the engine's view implies for an instance now in ``current``.

    None when the engine's view says nothing new (a created container not yet started).
    ``memory_limited``: the container runs under a memory limit. Docker sometimes misses
    the OOM flag (``OOMKilled`` false, no ``oom`` event) when a container dies at once,
    so exit code 137 (SIGKILL) under a limit, when nobody asked it to stop, counts as
    ``OOMKilled``. An exited container of a ``stopped`` instance says nothing new: its
    exit is the one already recorded (a restart outside gobrave shows as ``running``).
    """
    if state is None:
        return Observation(Status.FAILED, REMOVED_OUTSIDE)
    if state.status == "running":
        return Observation(Status.RUNNING, started=True)
    if state.status == "paused":
        return Observation(Status.PAUSED, started=True)
    if state.status == "rejected":  # the engine will never run it (an image it cannot pull)
        return Observation(Status.FAILED, state.error or "the engine refused the container")
    if state.status in ("exited", "dead"):
        code = state.exit_code
        if current == Status.STOPPED:
            return Observation(Status.STOPPED, "", code, started=True)
        if state.oom_killed or (
            memory_limited and code == SIGKILLED and current not in ASKED_TO_STOP
        ):
            return Observation(Status.FAILED, OOM_KILLED, code, started=True)
        if code == 0 or current in ASKED_TO_STOP:
            return Observation(Status.STOPPED, "", code, started=True)
        message = f"exited with code {code}" + (f": {state.error}" if state.error else "")
        return Observation(Status.FAILED, message, code, started=True)
    return None


def apply_observation(
    instance: ContainerInstance,
    observation: Observation,
    *,
    actor: str,
    data: dict[str, Any] | None = None,
) -> bool:
    """Move a locked instance as the observation says. True when its state changed.

    ``data`` (e.g. the engine event that prompted the look) is kept on every history
    entry this writes.

    1. Already there: nothing to do.
    2. The move is allowed: make it.
    3. The container did run and ``current → running → target`` is allowed: take both.
    4. Otherwise keep the state and record the observation with the reason (a stopped
       instance whose container vanished stays stopped, marked missing).
    """
    current, target = instance.status, observation.target
    fields = {}
    if target in (Status.STOPPED, Status.FAILED):
        fields["exit_code"] = observation.exit_code
    if target == Status.FAILED:
        fields["reason"] = observation.reason
    if observation.reason == REMOVED_OUTSIDE and not instance.runtime_missing:
        instance.runtime_missing = True
        instance.save(update_fields=["runtime_missing"])
    if current == target:
        return False
    if can_move(current, target):
        path = [target]
    elif (
        observation.started
        and can_move(current, Status.RUNNING)
        and can_move(Status.RUNNING, target)
    ):
        path = [Status.RUNNING, target]  # it did start: the shortest true path
    else:
        path = []
    for step in path:
        final = step == target
        move(
            instance,
            step,
            actor=actor,
            kind="runtime",
            message=observation.reason if final else "started",
            data=data,
            **(fields if final else {}),
        )
    if path:
        return True
    record(
        instance,
        kind="runtime",
        actor=actor,
        from_status=current,
        to_status=current,
        message=f"engine reports {target}"
        + (f" ({observation.reason})" if observation.reason else "")
        + f"; kept {current}",
        data=data,
    )
    return False
