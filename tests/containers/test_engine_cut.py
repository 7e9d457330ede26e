"""A second Docker Engine over TCP whose link is cut silently, then restored (issue 16 item
4; issue 27 item 4: what becomes of the instances on it).

The test starts a private ``dockerd`` reached over TCP (``tests/private_engine.py`` with
``tcp=True``: a network namespace of its own with a veth pair, 10.251.N.0/30, used only
between the two ends it made; its own data-root, exec-root, pidfile; a unix socket of its
own for the test's side door) and loads the test image into it. Then,
with the whole pipeline running: the link is cut by dropping every packet inside the
namespace (no RST, no ICMP: silence), a container of ours is killed behind gobrave's back
through the side door, and the link comes back. The later tests take the link itself down
inside the namespace (``ip link set ... down`` on the veth: a pulled cable, not a clean
shutdown) with the engine's heartbeat fast (``engine_ping_interval``), once for a
transient loss and once past ``engine_lost_after``. Everything it made is removed
afterwards, also when it fails. Needs root, ``ip``, ``nsenter``, ``iptables`` and
``dockerd``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import docker
import pytest

from containers.engines.labels import LABEL_INSTALLATION
from containers.models import ContainerEvent, ContainerInstance, OrphanContainer, Runtime
from containers.requests.services import (
    container_create_by_template,
    container_start,
    container_stop,
)
from outbox.models import OutboxEvent
from tests.containers.conftest import EXIT_ON_TERM, IMAGE, _unavailable
from tests.factories import UserFactory
from tests.private_engine import PrivateDockerd, missing_tools
from tests.processes import relay_drain, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow]

# The engines' heartbeat in these tests: a ping every half second, an answer within 2 s.
HEARTBEAT = {"container_engine_ping_interval": "0.5", "container_engine_ping_timeout": "2"}


@pytest.fixture(scope="module")
def remote_engine() -> Iterator[PrivateDockerd]:
    if reason := missing_tools("iptables"):
        _unavailable(reason)
    engine = PrivateDockerd("cut", live_restore=False, tcp=True)
    try:
        engine.start()
        engine.load_image(IMAGE)

        def over_tcp() -> bool:
            try:
                return docker.APIClient(base_url=engine.url, version="auto", timeout=10).ping()
            except Exception:  # noqa: BLE001 - not up yet
                return False

        wait_for(over_tcp, timeout=90, interval=0.2, message="the daemon to answer over TCP")
        yield engine
    finally:
        engine.destroy()


def _shown(*instances: ContainerInstance) -> str:
    lines = []
    for instance in instances:
        row = ContainerInstance.objects.filter(pk=instance.pk).first()
        requests = list(
            OutboxEvent.objects.filter(aggregate_id=str(instance.pk))
            .order_by("id")
            .values_list("kind", "status", "attempts", "outcome", "last_error")
        )
        if row is None:
            lines.append(f"{instance.pk}: gone {requests}")
        else:
            where = row.runtime.name if row.runtime else "(not placed)"
            lines.append(
                f"{row.pk} on {where}: {row.status} exit={row.exit_code} "
                f"reason={row.status_reason!r} requests={requests}"
            )
    health = Runtime.objects.values_list("name", "health", "health_since", "last_error")
    return "\n".join([*lines, f"runtimes: {list(health)}"])


def _status(instance: ContainerInstance) -> str:
    return ContainerInstance.objects.get(pk=instance.pk).status


def test_a_silently_cut_engine_is_marked_waited_for_and_settled_when_it_returns(
    dock, remote_engine
):
    remote = Runtime.objects.create(
        name="remote",
        driver="docker",
        base_url=remote_engine.url,
        labels={"engine": "docker", "node": "remote"},
    )
    on_remote = dock.template(EXIT_ON_TERM, constraints={"node": "remote"})
    local = dock.template(EXIT_ON_TERM, constraints={"engine": "docker"})
    Runtime.objects.filter(pk=dock.runtime.pk).update(labels={"engine": "docker", "node": "here"})
    owner = UserFactory()
    side_door = docker.APIClient(base_url=remote_engine.side_door, version="auto", timeout=10)

    with dock.pipeline(**HEARTBEAT) as app:
        victim = container_create_by_template(template=on_remote, owner=owner, actor="t")
        wait_for(
            lambda: _status(victim) == "running",
            timeout=90,
            message="the remote instance to run",
            describe=lambda: _shown(victim) + "\n" + app.logs(),
        )
        wait_for(
            lambda: Runtime.objects.get(pk=remote.pk).health == "reachable",
            timeout=60,
            message="the remote engine to be recorded reachable",
            describe=lambda: _shown(victim),
        )

        remote_engine.cut()
        cut_at = time.monotonic()
        side_door.kill(f"gb-{victim.pk}")  # behind our back, while nobody can see it
        wait_for(
            lambda: Runtime.objects.get(pk=remote.pk).health == "unreachable",
            timeout=60,
            interval=0.2,
            message="the cut engine to be recorded unreachable within 60 s",
            describe=lambda: _shown(victim) + "\n" + app.logs(),
        )
        detected = time.monotonic() - cut_at
        print(f"cut detected after {detected:.1f}s")
        row = Runtime.objects.get(pk=remote.pk)
        assert row.health_since is not None and row.last_error, _shown(victim)
        assert _status(victim) == "running", _shown(victim)  # kept: nobody knows better

        # New creates while it is away: one that only the remote matches waits (accepted),
        # one that the local engine matches runs there.
        waiting = container_create_by_template(template=on_remote, owner=owner, actor="t")
        healthy = container_create_by_template(template=local, owner=owner, actor="t")
        wait_for(
            lambda: _status(healthy) == "running",
            timeout=90,
            message="a create on the local engine to run during the cut",
            describe=lambda: _shown(healthy, waiting, victim) + "\n" + app.logs(),
        )
        placed = ContainerInstance.objects.get(pk=healthy.pk).runtime_id
        assert placed == dock.runtime.pk, _shown(healthy)
        wait_for(
            lambda: "unreachable" in ContainerInstance.objects.get(pk=waiting.pk).status_reason,
            timeout=30,
            message="the waiting create to say why it waits",
            describe=lambda: _shown(waiting),
        )
        assert _status(waiting) == "pending", _shown(waiting)
        assert OutboxEvent.objects.get(aggregate_id=str(waiting.pk)).attempts == 0, _shown(waiting)
        assert _status(victim) == "running", _shown(victim)

        remote_engine.restore()
        wait_for(
            lambda: Runtime.objects.get(pk=remote.pk).health == "reachable",
            timeout=90,
            interval=0.2,
            message="the engine to be recorded reachable after the link returned",
            describe=lambda: _shown(victim, waiting) + "\n" + app.logs(),
        )
        wait_for(
            lambda: _status(victim) == "failed" and _status(waiting) == "running",
            timeout=90,
            interval=0.2,
            message="the killed instance settled and the waiting create run",
            describe=lambda: _shown(victim, waiting) + "\n" + app.logs(),
        )
        killed = ContainerInstance.objects.get(pk=victim.pk)
        assert killed.exit_code == 137, _shown(victim)
        assert ContainerInstance.objects.get(pk=waiting.pk).status_reason == "", _shown(waiting)
        # No wrong transition on the way: running until the engine answered, then failed.
        moves = [
            (row.from_status, row.to_status)
            for row in ContainerEvent.objects.filter(instance_id=victim.pk).order_by("id")
            if row.from_status != row.to_status
        ]
        assert moves == [
            ("", "pending"),
            ("pending", "creating"),
            ("creating", "running"),
            ("running", "failed"),
        ], moves


UNREACHABLE = "engine unreachable since "


def _moves(instance: ContainerInstance) -> list[tuple[str, str]]:
    return [
        (row.from_status, row.to_status)
        for row in ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id")
        if row.from_status != row.to_status
    ]


def _row(instance: ContainerInstance) -> ContainerInstance:
    return ContainerInstance.objects.get(pk=instance.pk)


def _health(runtime: Runtime) -> str:
    return Runtime.objects.get(pk=runtime.pk).health


def _ours(side_door: docker.APIClient, installation: str) -> dict[str, str]:
    """``{container name: id}`` of this test's containers on the engine (the side door)."""
    label = f"{LABEL_INSTALLATION}={installation}"
    return {
        c["Names"][0].lstrip("/"): c["Id"]
        for c in side_door.containers(all=True, filters={"label": label})
    }


def _running_and_stopped(dock, remote_engine, owner):
    """A ``remote`` runtime with one instance running and one stopped on it, made by the
    relay in this process (the same handlers the workers run, on the real engine), before
    any process starts."""
    remote = Runtime.objects.create(
        name="remote", driver="docker", base_url=remote_engine.url, labels={"node": "remote"}
    )
    on_remote = dock.template(EXIT_ON_TERM, constraints={"node": "remote"})
    running = container_create_by_template(template=on_remote, owner=owner, actor="t")
    stopped = container_create_by_template(template=on_remote, owner=owner, actor="t")
    assert relay_drain() == ["sent", "sent"], _shown(running, stopped)
    container_stop(instance_id=stopped.pk, actor="t")
    assert relay_drain() == ["sent"], _shown(stopped)
    assert (_status(running), _status(stopped)) == ("running", "stopped"), _shown(running, stopped)
    return remote, running, stopped


def _followed(app, remote: Runtime) -> None:
    """Wait until the monitor's heartbeat has recorded the engine reachable."""
    wait_for(
        lambda: _health(remote) == "reachable",
        timeout=60,
        message="the monitor to record the remote engine reachable",
        describe=app.logs,
    )


def test_an_engine_whose_link_goes_down_keeps_its_instances_and_adopts_them_when_back(
    dock, remote_engine
):
    owner = UserFactory()
    side_door = docker.APIClient(base_url=remote_engine.side_door, version="auto", timeout=10)
    remote, running, stopped = _running_and_stopped(dock, remote_engine, owner)
    with dock.app(**HEARTBEAT) as app:
        app.cluster("create")  # its pusher claims on NOTIFY: no dispatcher needed here
        app.monitor()
        _followed(app, remote)
        before = _ours(side_door, dock.installation)
        assert sorted(before) == sorted([f"gb-{running.pk}", f"gb-{stopped.pk}"]), before

        remote_engine.link_down()
        try:
            wait_for(
                lambda: all(
                    _row(i).status_reason.startswith(UNREACHABLE) for i in (running, stopped)
                ),
                timeout=30,
                interval=0.1,
                message="the instances to say their engine is unreachable",
                describe=lambda: _shown(running, stopped) + "\n" + app.logs(),
            )
            assert _health(remote) == "unreachable", _shown(running)
            # A request made while it is away waits for it (no attempt counted).
            container_start(instance_id=stopped.pk, actor="t")
            wait_for(
                lambda: OutboxEvent.objects.filter(
                    aggregate_id=str(stopped.pk), kind="ContainerStartRequest", outcome="deferred"
                ).exists(),
                timeout=30,
                message="the start made while the engine is away to be deferred",
                describe=lambda: _shown(stopped) + "\n" + app.logs(),
            )
            start = OutboxEvent.objects.get(
                aggregate_id=str(stopped.pk), kind="ContainerStartRequest"
            )
            assert (start.status, start.attempts) == ("pending", 0), _shown(stopped)
            assert _status(running) == "running", _shown(running)  # kept: nobody knows better
            assert _status(stopped) == "start_pending", _shown(stopped)
            assert _row(stopped).status_reason.startswith(UNREACHABLE), _shown(stopped)
        finally:
            remote_engine.link_up()

        wait_for(
            lambda: (
                _status(stopped) == "running"
                and all(_row(i).status_reason == "" for i in (running, stopped))
            ),
            timeout=60,
            interval=0.1,
            message="the waiting start to run and both reasons to clear",
            describe=lambda: _shown(running, stopped) + "\n" + app.logs(),
        )
        assert _health(remote) == "reachable"
        # Adopted, never duplicated: the same two containers, with the same ids.
        assert _ours(side_door, dock.installation) == before
        assert _row(running).container_id == before[f"gb-{running.pk}"]
        assert _moves(running) == [
            ("", "pending"),
            ("pending", "creating"),
            ("creating", "running"),
        ], _moves(running)
        assert _moves(stopped)[3:] == [
            ("running", "stop_pending"),
            ("stop_pending", "stopping"),
            ("stopping", "stopped"),
            ("stopped", "start_pending"),
            ("start_pending", "starting"),
            ("starting", "running"),
        ], _moves(stopped)


def test_past_engine_lost_after_its_instances_are_given_up_and_a_container_back_is_removed(
    dock, remote_engine
):
    owner = UserFactory()
    side_door = docker.APIClient(base_url=remote_engine.side_door, version="auto", timeout=10)
    remote, running, stopped = _running_and_stopped(dock, remote_engine, owner)
    with dock.app(**HEARTBEAT, container_engine_lost_after="2") as app:
        app.monitor()  # the heartbeat gives up on the engine; the reconciler removes orphans
        _followed(app, remote)
        remote_engine.link_down()
        try:
            wait_for(
                lambda: _status(running) == "failed" and _row(stopped).runtime_missing,
                timeout=30,
                interval=0.1,
                message="the engine lost: the running instance failed, the stopped one missing",
                describe=lambda: _shown(running, stopped) + "\n" + app.logs(),
            )
            lost = _row(running)
            assert lost.status_reason.startswith("engine lost: runtime remote"), _shown(running)
            assert lost.runtime_missing, _shown(running)
            assert _moves(running)[-2:] == [("creating", "running"), ("running", "failed")]
            assert _status(stopped) == "stopped", _shown(stopped)
            assert _moves(stopped)[-1] == ("stopping", "stopped"), _moves(stopped)
        finally:
            remote_engine.link_up()

        # Back with both containers: the given-up one is removed as an orphan (whatever
        # orphan_policy), the stopped one is its instance's again.
        wait_for(
            lambda: (
                f"gb-{running.pk}" not in _ours(side_door, dock.installation)
                and not _row(stopped).runtime_missing
            ),
            timeout=60,
            interval=0.1,
            message="the given-up container removed and the stopped one adopted",
            describe=lambda: (
                _shown(running, stopped)
                + f"\non the engine: {_ours(side_door, dock.installation)}\n"
                + app.logs()
            ),
        )
        orphan = OrphanContainer.objects.get(runtime=remote)
        assert orphan.name == f"gb-{running.pk}" and orphan.removed_at, orphan.__dict__
        assert _status(running) == "failed" and _status(stopped) == "stopped"
        assert list(_ours(side_door, dock.installation)) == [f"gb-{stopped.pk}"]
