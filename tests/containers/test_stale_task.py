"""A daemon restart that cuts a start short (issue 17), on a private engine.

The engine then keeps a task for the container it does not run, and every later start of
that container answers HTTP 500 "task <id>: already exists", through any number of
further daemon restarts. The private engine's gated runtime
(``PrivateDockerd(gated_runtime=True)``) holds the task create, so the start is in
flight, for sure, when the daemon is stopped (SIGTERM, ``--live-restore``: what the
chaos soak does) and its containerd goes down with the create unfinished.

- a create heals: its never-started container is replaced, the instance ends
  ``running`` with exactly one container;
- a start of a stopped container (the user's files and logs are in it) fails at once,
  saying why and what to do; the container stays.
"""

from __future__ import annotations

import signal

import pytest

from containers.engines.labels import LABEL_INSTANCE
from containers.models import ContainerEvent, ContainerInstance
from containers.requests.services import (
    container_create_by_template,
    container_start,
    container_stop,
)
from outbox.models import OutboxEvent
from tests.processes import outbox_rows, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.docker]

SLEEPS = ["sleep", "1000"]


def _status(instance: ContainerInstance) -> str:
    return ContainerInstance.objects.get(pk=instance.pk).status


def _restart_under_held_start(dock, app) -> None:
    """Hold the engine's task creates until the worker's start is in flight, stop the
    daemon under it (SIGTERM), then start the daemon again.

    Stopping, the daemon closes its API at once, then waits 15 s for its containerd
    (busy with the held create) before it kills it; the test kills it as soon as the API
    is closed: the same end, 15 s sooner. Released any earlier, the create completes
    and the start succeeds (tried).
    """
    engine = dock.engine
    wait_for(engine.task_create_held, timeout=60, message="a task create held",
             describe=lambda: outbox_rows() + "\n" + app.logs())  # fmt: skip
    engine.process.send_signal(signal.SIGTERM)
    wait_for(engine.api_closed, timeout=30, message="the daemon's API closed")
    engine.kill_containerd()
    engine.release_task_creates()
    engine.stop()
    engine.start()


def test_create_cut_by_a_daemon_restart_replaces_its_container_and_runs(gated_dock, owner):
    dock, engine = gated_dock, gated_dock.engine
    template = dock.template(SLEEPS)
    # Calls refused while the daemon is down count attempts: room for a slow machine.
    # The replacement itself happens within one attempt.
    with dock.pipeline(outbox_max_attempts=20) as app:
        engine.hold_task_creates()
        instance = container_create_by_template(template=template, owner=owner, actor="t")
        _restart_under_held_start(dock, app)
        wait_for(lambda: _status(instance) == "running", timeout=60, message="running",
                 describe=lambda: outbox_rows() + "\n" + app.logs())  # fmt: skip
    instance.refresh_from_db()
    history = list(ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id"))
    shown = "\n".join(f"{e.kind} {e.from_status}->{e.to_status} {e.message}" for e in history)
    shown += "\n" + outbox_rows()
    # The engine really answered with the stale task, and the create replaced the container.
    replaced = [e for e in history if e.kind == "cleanup" and "replacing container" in e.message]
    assert len(replaced) == 1, shown
    assert ": already exists (HTTP 500)" in replaced[0].message, shown
    with engine.client() as client:  # a new client: the fixture's predates the restart
        ours = client.containers(all=True, filters={"label": f"{LABEL_INSTANCE}={instance.pk}"})
    assert [c["Id"] for c in ours] == [instance.container_id], (ours, shown)
    assert ours[0]["State"] == "running", (ours, shown)
    assert ours[0]["Names"] == [f"/gb-{instance.pk}"], (ours, shown)
    assert instance.container_id[:12] not in replaced[0].message, shown  # a new container
    row = OutboxEvent.objects.get(aggregate_id=instance.pk, kind="ContainerCreateRequest")
    assert row.status == "sent", shown


def test_start_cut_by_a_daemon_restart_fails_at_once_and_keeps_the_container(gated_dock, owner):
    dock, engine = gated_dock, gated_dock.engine
    template = dock.template(SLEEPS)
    with dock.pipeline() as app:
        instance = container_create_by_template(template=template, owner=owner, actor="t")
        wait_for(lambda: _status(instance) == "running", timeout=60, message="running",
                 describe=lambda: outbox_rows() + "\n" + app.logs())  # fmt: skip
        container_stop(instance_id=instance.pk, actor="t")
        wait_for(lambda: _status(instance) == "stopped", timeout=60, message="stopped",
                 describe=lambda: outbox_rows() + "\n" + app.logs())  # fmt: skip
        engine.hold_task_creates()
        container_start(instance_id=instance.pk, actor="t")
        _restart_under_held_start(dock, app)
        request = OutboxEvent.objects.filter(aggregate_id=instance.pk, kind="ContainerStartRequest")
        wait_for(lambda: request.filter(status="dead").exists(), timeout=60, message="dead",
                 describe=lambda: outbox_rows() + "\n" + app.logs())  # fmt: skip
    instance.refresh_from_db()
    row = request.get()
    shown = f"{instance.status} {instance.status_reason!r}\n{outbox_rows()}"
    assert instance.status == "failed", shown
    assert "can no longer be started" in instance.status_reason, shown
    assert "already exists (HTTP 500)" in row.last_error, shown
    # Dead at the first stale answer: the cut call, maybe refused calls while the daemon
    # was down, then one permanent failure; never the 8 attempts of a retriable error.
    assert row.attempts < 8, shown
    with engine.client() as client:
        state = client.inspect_container(f"gb-{instance.pk}")["State"]
    assert state["Status"] == "exited", (state, shown)
