"""Hardened containers on the real Docker Engine (SPEC 8, container.security).

Each test creates instances through the real processes, then reads what the engine made
(HostConfig and Config) and what the process inside sees.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from core.config import SECURITY_DEFAULTS
from tests.containers.conftest import _unavailable
from tests.containers.test_docker_lifecycle import create, reaches
from tests.containers.test_docker_workspaces import logs, said
from tests.factories import UserFactory

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBE = (
    "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo uid=$(id -u); "
    "touch /probe 2>/dev/null && echo root-writable || echo root-read-only; "
    "touch /tmp/probe && echo tmp-writable; echo probed; sleep 600"
)


def inspect(dock, instance) -> dict:
    return dock.client.inspect_container(f"gb-{instance.pk}")


def test_a_container_runs_hardened_by_default(dock, pipeline, owner):
    instance = reaches(create(dock.template(PROBE), owner), "running")
    data = inspect(dock, instance)
    host, config = data["HostConfig"], data["Config"]
    uid = 1_000_000 + owner.pk
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == SECURITY_DEFAULTS["capabilities"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["PidsLimit"] == 1024
    assert host["Memory"] == host["MemorySwap"] == 1024**3
    assert host["NanoCpus"] == 1_000_000_000
    assert host["NetworkMode"] == "bridge"
    assert host["IpcMode"] == "private"
    assert host["PidMode"] == "" and host["UTSMode"] == "" and host["UsernsMode"] == ""
    assert host["ReadonlyRootfs"] is False and not host.get("Tmpfs")
    assert host["Runtime"] == "runc"
    assert host["GroupAdd"] == [str(uid)]
    assert config["User"] == f"{uid}:{uid}"
    seen = said(dock, instance, "probed")
    assert "NoNewPrivs:\t1" in seen and "CapEff:\t0000000000000000" in seen, seen
    assert f"uid={uid}" in seen and "root-read-only" in seen  # not root: / is not its own


def test_template_overrides_apply_to_the_container(dock, owner, gobrave_config):
    gobrave_config(container={"security": {**SECURITY_DEFAULTS, "runtimes_allowed": ["runsc"]}})
    template = dock.template(
        PROBE,
        resources={"pids": 64, "memory": "32m", "cpu": 0.5},
        security={
            "user": "image",
            "cap_add": ["NET_RAW"],
            "read_only_rootfs": True,
            "network": "none",
            "runtime": "runsc",  # mapped to runc on the test engine (scripts/test-engine.sh)
        },
    )
    with dock.pipeline():
        instance = reaches(create(template, owner), "running")
        seen = said(dock, instance, "probed")
    data = inspect(dock, instance)
    host, config = data["HostConfig"], data["Config"]
    assert host["Runtime"] == "runsc"
    assert host["ReadonlyRootfs"] is True
    assert host["Tmpfs"] == {"/tmp": f"rw,nosuid,nodev,size={64 * 1024**2}"}
    assert host["NetworkMode"] == "none"
    assert sorted(host["CapAdd"]) == sorted({*SECURITY_DEFAULTS["capabilities"], "NET_RAW"})
    assert host["CapDrop"] == ["ALL"] and host["Privileged"] is False
    assert (host["PidsLimit"], host["Memory"], host["NanoCpus"]) == (64, 32 * 1024**2, 5 * 10**8)
    assert config["User"] == ""  # the image's user (root in the test image)
    assert "uid=0" in seen and "root-read-only" in seen and "tmp-writable" in seen, seen
    assert "NoNewPrivs:\t1" in seen


def _engine_has_iptables() -> bool:
    iptables = shutil.which("iptables")
    if iptables is None:
        return False
    probe = subprocess.run(
        [iptables, "-S", "DOCKER-ISOLATION-STAGE-1"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


SERVE = "echo hello > /tmp/index.html && httpd -f -p 8080 -h /tmp"


def _fetch(dock, instance, address: str) -> tuple[int, str]:
    # busybox's static wget crashes resolving even an address; nc speaks HTTP well enough.
    request = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {address} 8080"
    run = dock.client.exec_create(f"gb-{instance.pk}", ["sh", "-c", request])
    output = dock.client.exec_start(run["Id"]).decode(errors="replace")
    return dock.client.exec_inspect(run["Id"])["ExitCode"], output


def test_owners_networks_keep_one_owner_s_containers_from_another_s(dock, owner):
    if not _engine_has_iptables():
        _unavailable("the engine runs without iptables: per-owner networks cannot isolate")
    bob = UserFactory(username="bob")
    template = dock.template(SERVE, security={"network": "owner"})
    with dock.pipeline():
        server = reaches(create(template, owner), "running")
        neighbour = reaches(create(template, owner), "running")
        stranger = reaches(create(template, bob), "running")
    networks = inspect(dock, server)["NetworkSettings"]["Networks"]
    (name,) = networks
    assert name == server.spec["network"] and name != stranger.spec["network"]
    assert inspect(dock, neighbour)["HostConfig"]["NetworkMode"] == name
    address = networks[name]["IPAddress"]
    code, body = _fetch(dock, neighbour, address)
    assert code == 0 and body.strip().endswith("hello"), (code, body, logs(dock, server))
    code, body = _fetch(dock, stranger, address)
    assert code != 0 and "hello" not in body, (code, body)
