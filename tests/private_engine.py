"""A Docker Engine of a test's (or a benchmark's) own, to restart under running processes.

Never the machine's shared engine: a ``dockerd`` (with ``--live-restore`` unless told
otherwise: a restart then keeps the containers running) inside a
network namespace of its own (``ip netns add``; its default bridge and addresses live
there, so they never meet the shared engine's), with its own data-root, exec-root,
pidfile, cgroup parent, an empty daemon config and a unix socket under
``/tmp/gobrave-<label>-<tag>/``. The test image is copied in from the shared engine
(``docker save | docker load``: nothing is pulled). ``destroy()`` removes everything it
made (containers, their shims, mounts, the namespace, the directory) and also runs at
interpreter exit, so a failed test or a Ctrl-C leaves nothing behind.

``gated_runtime=True`` makes the engine run containers through a wrapper of ``runc``
that, while ``hold_task_creates()`` is in force, waits before creating a task: a start
is then in flight for as long as the test wants (to restart the daemon under it).

With ``tcp=True`` it is also a remote engine: a veth pair (10.251.N.0/30, used only
between its two ends) links the namespace to the host, gobrave reaches the daemon over
TCP (``url``) while the test keeps the unix socket (``side_door``), and ``cut()`` drops
every packet inside the namespace (no RST, no ICMP: silence) until ``restore()``;
``link_down()`` takes the link itself down (a pulled cable) until ``link_up()``. Set
``tls`` (the daemon's CA, certificate and key; its address, ``address``, is known from
construction on, to make the certificate for) before ``start()``: the TCP port then
speaks mutual TLS only (``--tlsverify``, port 2376). ``hostname``: the daemon runs in a
UTS namespace of its own under that name (``docker info``'s Name tells it apart).

Needs root, ``ip``, ``nsenter``, ``dockerd`` and ``docker`` (and ``iptables`` to cut).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import docker

TOOLS = ("ip", "nsenter", "dockerd", "docker")
PORT = 2375
TLS_PORT = 2376


def _run(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True, **kwargs)


SUBNET_LOCKS = Path("/tmp/gobrave-subnets")


def _free_subnet() -> tuple[int, int]:
    """A 10.251.N.0/30 subnet no other engine uses: not on any interface, and reserved
    by this engine (``(N, fd)``: an exclusive ``flock`` on N's lock file, held until
    ``destroy`` or this process ends). Several engines made at once, by threads of one
    process or by parallel test processes, each get their own N: an address is only
    put on an interface when the engine starts, so the interfaces alone would let two
    engines made in a row pick the same N (two runtimes at one address)."""
    SUBNET_LOCKS.mkdir(exist_ok=True)
    used = _run("ip", "-4", "-o", "addr", "show").stdout
    for n in random.sample(range(256), 256):
        if f"10.251.{n}." in used:
            continue
        fd = os.open(SUBNET_LOCKS / f"{n}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # per open file: threads too
        except BlockingIOError:
            os.close(fd)
            continue
        return n, fd
    raise RuntimeError("no free 10.251.N.0/30 subnet")


def missing_tools(*more: str) -> str:
    """Why no private engine can run here ("" when it can); ``more``: other tools."""
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    absent = [tool for tool in (*TOOLS, *more) if not shutil.which(tool)]
    return f"a private dockerd needs {', '.join(absent)}" if absent else ""


class PrivateDockerd:
    """One private engine: ``start()``, ``stop()``, ``restart()``, ``destroy()``.

    ``url`` is what gobrave's ``Runtime`` row uses; ``client()`` is the SDK on it.
    ``live_restore=False``: stopping the daemon stops its containers (SIGTERM to each).
    ``tcp=True``: ``url`` is a TCP address over the veth pair; ``side_door`` is always the
    unix socket.
    """

    def __init__(
        self,
        label: str = "engine",
        *,
        live_restore: bool = True,
        gated_runtime: bool = False,
        tcp: bool = False,
        tls: tuple[str, str, str] | None = None,
        hostname: str | None = None,
    ) -> None:
        self.live_restore, self.gated_runtime, self.tcp = live_restore, gated_runtime, tcp
        self.tls, self.hostname = tls, hostname
        self.subnet, self._subnet_lock = _free_subnet() if tcp else (None, None)
        self.address = f"10.251.{self.subnet}.2" if tcp else None
        self.tag = tag = uuid.uuid4().hex[:8]
        self.netns = f"gobrave-{label}-{tag}"
        self.root = Path(f"/tmp/gobrave-{label}-{tag}")
        self.side_door = f"unix://{self.root}/docker.sock"
        self.url = self.side_door
        self.hosts = [self.side_door]
        self.cgroup_parent = f"gobrave-{label}-{tag}"
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self._made_netns = False
        atexit.register(self.destroy)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 120) -> PrivateDockerd:
        """Start the daemon and wait until it answers (the first start makes its room)."""
        if not self._made_netns:
            for sub in ("data", "exec"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            (self.root / "daemon.json").write_text(self._daemon_config())
            _run("ip", "netns", "add", self.netns)
            self._made_netns = True
            self._nsenter("ip", "link", "set", "lo", "up")
            if self.tcp:
                self._link()
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - the daemon holds it
        uts = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname]
        self.process = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{self.netns}",
                *(uts if self.hostname else []),
                "dockerd",
                f"--config-file={self.root / 'daemon.json'}",
                f"--data-root={self.root / 'data'}",
                f"--exec-root={self.root / 'exec'}",
                f"--pidfile={self.root / 'dockerd.pid'}",
                *(f"--host={host}" for host in self.hosts),
                f"--cgroup-parent={self.cgroup_parent}",
                *(["--live-restore"] if self.live_restore else []),
                *(["--tls=false"] if self.tcp and not self.tls else []),
                *(
                    [
                        "--tlsverify",
                        f"--tlscacert={self.tls[0]}",
                        f"--tlscert={self.tls[1]}",
                        f"--tlskey={self.tls[2]}",
                    ]
                    if self.tls
                    else []
                ),
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
                "--userland-proxy=false",
                "--log-level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"private dockerd exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"private dockerd silent for {timeout:g}s:\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM the daemon and wait for it (with ``--live-restore`` containers live on,
        without it the daemon stops them first)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def restart(self, down_for: float = 0.0) -> float:
        """Stop, stay down ``down_for`` seconds, start; returns the seconds it was down."""
        began = time.monotonic()
        self.stop()
        time.sleep(down_for)
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    # --- the gated runtime -----------------------------------------------------------------

    def _daemon_config(self) -> str:
        if not self.gated_runtime:
            return "{}\n"
        gate, wrapper = self.root / "gate", self.root / "runc-gated"
        gate.mkdir()
        runc = shutil.which("runc") or "runc"
        # The shim calls the runtime as `runc [global options] create [options] <id>`.
        wrapper.write_text(
            "#!/bin/sh\n"
            'for arg in "$@"; do\n'
            f'  if [ "$arg" = create ] && [ -e {gate}/hold ]; then\n'
            f"    touch {gate}/held\n"
            f"    while [ -e {gate}/hold ]; do sleep 0.05; done\n"
            "    break\n"
            "  fi\n"
            "done\n"
            f'exec {runc} "$@"\n'
        )
        wrapper.chmod(0o755)
        config = {"runtimes": {"gated": {"path": str(wrapper)}}, "default-runtime": "gated"}
        return json.dumps(config) + "\n"

    def hold_task_creates(self) -> None:
        """From now on every task create waits (the start calling it stays in flight)."""
        assert self.gated_runtime, "hold_task_creates needs gated_runtime=True"
        (self.root / "gate" / "held").unlink(missing_ok=True)
        (self.root / "gate" / "hold").touch()

    def task_create_held(self) -> bool:
        """True once a task create has begun waiting since ``hold_task_creates()``."""
        return (self.root / "gate" / "held").exists()

    def release_task_creates(self) -> None:
        """Let the waiting task creates (and every later one) go on."""
        (self.root / "gate" / "hold").unlink(missing_ok=True)

    def api_closed(self) -> bool:
        """True once the daemon has closed its socket (a stop under way, or done)."""
        return not (self.root / "docker.sock").exists()

    def kill_containerd(self) -> None:
        """SIGKILL the daemon's own containerd (``exec/containerd``), as the daemon does
        when its containerd does not stop within 15 s of its own stop."""
        pid = int((self.root / "exec" / "containerd" / "containerd.pid").read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def answers(self) -> bool:
        try:
            with self.client(timeout=5) as client:
                return client.ping()
        except Exception:  # noqa: BLE001 - not up (yet)
            return False

    def client(self, timeout: float = 30) -> docker.APIClient:
        """The SDK on the side door (the unix socket: it answers through a cut)."""
        return docker.APIClient(base_url=self.side_door, version="auto", timeout=timeout)

    def start_with(self, image: str, *, attempts: int = 3) -> PrivateDockerd:
        """Start the daemon (tried ``attempts`` times: a dockerd start now and then times
        out waiting for its containerd) and copy ``image`` into it."""
        for attempt in range(attempts):
            try:
                self.start(timeout=60)
                break
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                self.stop()
        self.load_image(image)
        return self

    def load_image(self, image: str) -> None:
        """Copy ``image`` from the machine's engine into this one (read-only there)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        loaded = _run("docker", "-H", self.side_door, "load", stdin=save.stdout, check=False)
        save.wait()
        if save.returncode or loaded.returncode:
            raise RuntimeError(f"could not load {image} into the private engine: {loaded.stderr}")

    def log_tail(self, chars: int = 3000) -> str:
        path = self.root / "dockerd.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    # --- the TCP link (tcp=True) ---------------------------------------------------------

    def _link(self) -> None:
        n = self.subnet
        host_ip, ns_ip = f"10.251.{n}.1", f"10.251.{n}.2"
        host_end, ns_end = f"gbh{self.tag}", f"gbn{self.tag}"
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _run("ip", "link", "set", ns_end, "netns", self.netns)  # goes with the namespace
        _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        self._nsenter("ip", "addr", "add", f"{ns_ip}/30", "dev", ns_end)
        self._nsenter("ip", "link", "set", ns_end, "up")
        self.url = f"tcp://{ns_ip}:{TLS_PORT if self.tls else PORT}"
        self.hosts = [self.url, self.side_door]

    def cut(self) -> None:
        """Drop every packet in the namespace: the host sees silence, nothing refused."""
        for chain, side in (("INPUT", "-i"), ("OUTPUT", "-o")):
            self._nsenter("iptables", "-w", "-I", chain, "!", side, "lo", "-j", "DROP")

    def restore(self) -> None:
        for chain, side in (("INPUT", "-i"), ("OUTPUT", "-o")):
            self._nsenter("iptables", "-w", "-D", chain, "!", side, "lo", "-j", "DROP")

    def link_down(self) -> None:
        """Take the namespace's end of the veth pair down, as a pulled cable: the engine
        sends nothing more (no RST, no FIN), what the host sends goes nowhere, and a new
        connection finds no route; the daemon and its containers run on. Until
        ``link_up()``."""
        self._nsenter("ip", "link", "set", f"gbn{self.tag}", "down")

    def link_up(self) -> None:
        self._nsenter("ip", "link", "set", f"gbn{self.tag}", "up")

    # --- cleanup -------------------------------------------------------------------------

    def destroy(self) -> None:
        """Remove every container, the daemon, its shims and mounts, the namespace, the
        directory. Idempotent; safe after a failed start."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(Exception), self.client(timeout=30) as client:
                for container in client.containers(all=True):
                    client.remove_container(container["Id"], force=True)
        self.stop()
        self.process = None
        # Shims (and a containerd) that outlived the daemon name our root in their argv.
        for pid in self._leftover_pids() + self._cgroup_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mounts = [
            line.split()[1]
            for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(self.root))
        ]
        for mount in sorted(mounts, key=len, reverse=True):
            _run("umount", "-l", mount, check=False)
        if self._made_netns:
            _run("ip", "netns", "delete", self.netns, check=False)  # and the veth pair
            self._made_netns = False
        if self.tcp:
            _run("ip", "link", "delete", f"gbh{self.tag}", check=False)
        if self._subnet_lock is not None:
            os.close(self._subnet_lock)  # the subnet is free again
            self._subnet_lock = None
        for cgroup in Path("/sys/fs/cgroup").glob(f"*/{self.cgroup_parent}"):
            for below in sorted(cgroup.glob("**/"), key=lambda p: len(str(p)), reverse=True):
                with contextlib.suppress(OSError):
                    below.rmdir()
        shutil.rmtree(self.root, ignore_errors=True)

    def _leftover_pids(self) -> list[int]:
        found = []
        marker = str(self.root).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
        return found

    def _cgroup_pids(self) -> list[int]:
        found = []
        for procs in Path("/sys/fs/cgroup").glob(f"*/{self.cgroup_parent}/**/cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found += [int(pid) for pid in procs.read_text().split()]
        return found

    def _nsenter(self, *args: str) -> None:
        _run("nsenter", f"--net=/run/netns/{self.netns}", *args)
