"""Which start refusals name a stale task of the container (``docker.stale_task_of``):
the engine's answers after a daemon restart cut a start short (the task, the task's
state directory containerd kept, or containerd's bare "id already in use"), seen on
real engines (``test_stale_task.py`` makes the first; the chaos soak met the others),
and answers that are not one."""

from __future__ import annotations

import pytest

from containers.engines.docker import stale_task_of

ID = "68d61e6c802d01e20ec26ed72891c7aa1928527443bb57a3143d5aec6a98a120"


@pytest.mark.parametrize(
    "explanation",
    [
        f"task {ID}: already exists",
        f"failed to start shim: mkdir /var/run/docker/containerd/daemon/"
        f"io.containerd.runtime.v2.task/moby/{ID}: file exists: unknown",
        f"failed to start shim: mkdir /tmp/x/exec/containerd/daemon/"
        f"io.containerd.runtime.v2.task/moby/{ID}: file exists",
    ],
)
def test_a_stale_task_answer_names_its_container(explanation):
    assert stale_task_of(explanation) == ID


@pytest.mark.parametrize(
    "explanation",
    [
        "",
        f"task {ID[:-1]}: already exists",  # not a container id
        f"failed to start shim: mkdir /run/x/{ID}: permission denied: unknown",
        f"failed to create shim task: OCI runtime create failed: {ID}: file exists",
        "Container is paused, unpause the container before stopping or killing",
    ],
)
def test_other_answers_name_none(explanation):
    assert stale_task_of(explanation) is None
    assert stale_task_of(explanation, ID) is None


def test_containerds_bare_answer_names_the_container_being_started():
    """The chaos soak met it (HTTP 500) after a daemon restart cut a start short: it names
    no id, so it is the task of the container the start was for."""
    assert stale_task_of("id already in use", ID) == ID
    assert stale_task_of("id already in use") is None  # no container to name
    assert stale_task_of("name already in use", ID) is None
