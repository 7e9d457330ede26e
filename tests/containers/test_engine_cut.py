"""A second Docker Engine over TCP whose link is cut silently, then restored (issue 16 item 4).

The test starts a private ``dockerd`` reached over TCP (``tests/private_engine.py`` with
``tcp=True``: a network namespace of its own with a veth pair, 10.251.N.0/30, used only
between the two ends it made; its own data-root, exec-root, pidfile; a unix socket of its
own for the test's side door) and loads the test image into it. Then,
with the whole pipeline running: the link is cut by dropping every packet inside the
namespace (no RST, no ICMP: silence), a container of ours is killed behind gobrave's back
through the side door, and the link comes back. Everything it made is removed afterwards,
also when it fails. Needs root, ``ip``, ``nsenter``, ``iptables`` and ``dockerd``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import docker
import pytest

from containers.models import ContainerEvent, ContainerInstance, Runtime
from containers.requests.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.containers.conftest import EXIT_ON_TERM, IMAGE, _unavailable
from tests.factories import UserFactory
from tests.private_engine import PrivateDockerd, missing_tools
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.slow]


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

    with dock.pipeline() as app:
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
