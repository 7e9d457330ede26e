"""What one pass of the runner decided (``Pass``), the runner's constants and its config."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from containers.models import ContainerInstance
from containers.states import Status
from dags.models import DagRun
from dags.states import NodeStatus, RunStatus

N, R = NodeStatus, RunStatus


STOPPABLE = frozenset({Status.RUNNING, Status.PAUSED})


DELETABLE = frozenset(
    {
        Status.PENDING,
        Status.CREATING,
        Status.RUNNING,
        Status.PAUSED,
        Status.STOP_PENDING,
        Status.STOPPING,
        Status.STOPPED,
        Status.FAILED,
    }
)


SETTLED_WELL = frozenset({N.RUNNING, N.SUCCEEDED, N.CANCELLED})  # of a current attempt


POLICY_RANK = {"none": 0, "stop": 1, "delete": 2}


NOT_RECOVERED = "not recovered at start"


RECOVERED_AT_START = "advanced again from its stored state: the whole installation had been down"


MAX_ROUNDS = 5


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


@dataclass
class Pass:
    """What step 1 decided for steps 2 and 3."""

    run: DagRun | None = None
    ready: list[str] = field(default_factory=list)
    requests: list[tuple[uuid.UUID, str]] = field(default_factory=list)  # (instance, stop|delete)
    # (instance, key, attempt): failed attempts whose output is kept before their delete
    keep: list[tuple[ContainerInstance, str, int]] = field(default_factory=list)
    remove_workspace: bool = False
    again: bool = False  # a ready node had an instance before (a retry, a lost row)
    first: str = ""  # what creating the first ready node in step 1 gave (``_create_one``)
