"""A second Docker Engine over TCP whose link is cut silently, then restored (issue 16 item 4).

The test makes a network namespace of its own with a veth pair (10.251.N.0/30, used only
between the two ends it made), starts a private ``dockerd`` inside it (``nsenter --net``:
its own data-root, exec-root, pidfile, no bridge, no iptables rules, a TCP host plus a
unix socket of its own for the test's side door) and loads the test image into it. Then,
with the whole pipeline running: the link is cut by dropping every packet inside the
namespace (no RST, no ICMP: silence), a container of ours is killed behind gobrave's back
through the side door, and the link comes back. Everything it made is removed afterwards,
also when it fails. Needs root, ``ip``, ``nsenter``, ``iptables`` and ``dockerd``.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from containers.models import ContainerEvent, ContainerInstance, Runtime
from containers.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.containers.conftest import EXIT_ON_TERM, IMAGE, _unavailable
from tests.factories import UserFactory
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PORT = 2375


def _run(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True, **kwargs)


@dataclass
class RemoteEngine:
    netns: str
    url: str  # tcp://10.251.N.2:2375, what gobrave uses
    side_door: str  # unix socket of this engine only, for the test
    root: Path

    def nsenter(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run("nsenter", f"--net=/run/netns/{self.netns}", *args, check=check)

    def cut(self) -> None:
        """Drop every packet in the namespace: the host sees silence, nothing refused."""
        for chain, side in (("INPUT", "-i"), ("OUTPUT", "-o")):
            self.nsenter("iptables", "-w", "-I", chain, "!", side, "lo", "-j", "DROP")

    def restore(self) -> None:
        for chain, side in (("INPUT", "-i"), ("OUTPUT", "-o")):
            self.nsenter("iptables", "-w", "-D", chain, "!", side, "lo", "-j", "DROP")


def _free_subnet() -> int:
    used = _run("ip", "-4", "-o", "addr", "show").stdout
    for n in random.sample(range(256), 256):
        if f"10.251.{n}." not in used:
            return n
    raise RuntimeError("no free 10.251.N.0/30 subnet")


@pytest.fixture(scope="module")
def remote_engine() -> Iterator[RemoteEngine]:
    tools = ("ip", "nsenter", "iptables", "dockerd", "docker")
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in tools):
        _unavailable(f"needs root and {', '.join(tools)}")
    tag = uuid.uuid4().hex[:6]
    netns, host_end, ns_end = f"gbcut{tag}", f"gbh{tag}", f"gbn{tag}"
    n = _free_subnet()
    host_ip, ns_ip = f"10.251.{n}.1", f"10.251.{n}.2"
    root = Path(f"/tmp/gbcut-{tag}")
    engine = RemoteEngine(netns, f"tcp://{ns_ip}:{PORT}", f"unix://{root}/docker.sock", root)
    daemon = None
    try:
        _run("ip", "netns", "add", netns)
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _run("ip", "link", "set", ns_end, "netns", netns)
        _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        engine.nsenter("ip", "addr", "add", f"{ns_ip}/30", "dev", ns_end)
        engine.nsenter("ip", "link", "set", ns_end, "up")
        engine.nsenter("ip", "link", "set", "lo", "up")
        for sub in ("data", "exec"):
            (root / sub).mkdir(parents=True)
        log = open(root / "dockerd.log", "w")  # noqa: SIM115 - closed in finally
        daemon = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{netns}",
                "dockerd",
                f"--data-root={root / 'data'}",
                f"--exec-root={root / 'exec'}",
                f"--pidfile={root / 'dockerd.pid'}",
                f"-H=tcp://{ns_ip}:{PORT}",
                f"-H={engine.side_door}",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                "--userland-proxy=false",
                "--tls=false",
                "--log-level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def up() -> bool:
            if daemon.poll() is not None:
                raise AssertionError((root / "dockerd.log").read_text()[-3000:])
            try:
                return docker.APIClient(base_url=engine.url, version="auto", timeout=10).ping()
            except Exception:  # noqa: BLE001 - not up yet
                return False

        wait_for(up, timeout=90, interval=0.2, message="the private dockerd to answer over TCP")
        save = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE)
        loaded = _run("docker", "-H", engine.url, "load", stdin=save.stdout, check=False)
        save.wait()
        assert save.returncode == 0 and loaded.returncode == 0, loaded.stderr
        yield engine
    finally:
        if daemon is not None:
            ids = _run("docker", "-H", engine.side_door, "ps", "-aq", check=False).stdout.split()
            if ids:
                _run("docker", "-H", engine.side_door, "rm", "-f", *ids, check=False)
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)
        _run("ip", "netns", "delete", netns, check=False)  # takes the veth pair with it
        _run("ip", "link", "delete", host_end, check=False)
        _run("umount", "-R", str(root / "data"), check=False)
        shutil.rmtree(root, ignore_errors=True)


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
            lines.append(
                f"{row.pk} on {row.runtime.name}: {row.status} exit={row.exit_code} "
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
        assert healthy.runtime_id == dock.runtime.pk, _shown(healthy)
        wait_for(
            lambda: _status(healthy) == "running",
            timeout=90,
            message="a create on the local engine to run during the cut",
            describe=lambda: _shown(healthy, waiting, victim) + "\n" + app.logs(),
        )
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
