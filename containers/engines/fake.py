"""A file-backed engine for tests, controlled from any process.

State lives in a directory (``fake:///tmp/dir``): one JSON file per container, an
append-only ``calls.log`` of every call, and control files the test writes:

- ``block-<op>``: the op waits while this file exists (op: create, start, stop, remove);
- ``delay-<op>``: holds seconds; the op sleeps that long;
- ``fail-<op>``: holds a count; each call fails (retriably) and decrements it;
- ``permanent-<op>``: the op fails permanently with the file's text;
- ``exit-on-start``: holds an exit code; ``start`` leaves the container exited with it;
- ``down``: ``ping()`` answers False (an engine that stopped answering);
- ``output``: what every container printed (``logs``; without it, one line).
- ``cpu.json``: ``{container name: cores}``, the CPU ``stats`` reports for each running
  container (a rate, as the Kubernetes metrics API gives it); absent names use 0.
- ``cpu-counter``: ``stats`` reports a cumulative CPU time instead (``cpu_total_ns``, as
  Docker's cgroup counter does): those rates summed over the wall time since the
  container's first look (``cpu-used.json`` keeps the sums; ``count_cpu()`` sets it).

Workspaces: ``ensure_workspace`` logs each call (``workspaces.log``) and makes the
workspace once (a file under ``volumes/`` holding a fresh id), ``remove_volume`` logs
each call (``volumes-removed.log``) and removes it; ``volume_id`` says which one exists.

Its output is one line, ``fake log line``; a container whose command is ``["env"]``
prints its env after it (``KEY=value`` lines), as the real program would, and a follow
yields that in pieces of ``ENV_PIECE`` bytes (values split across chunks).

Every change is also appended to ``events.log`` (one JSON ``EngineEvent`` a line), which
``events()`` replays from ``since_nano`` (inclusive, whole seconds, like Docker) and then
ends, as a dropped stream does; ``fail-events``/``permanent-events`` make it unreachable.
``set_state()`` changes a container behind gobrave's back (an exit, an OOM, a pause).

It honours the engine contract (idempotent create by name, stop/remove of a missing
container succeed), so relay tests exercise the same paths as the Docker engine.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fcntl
import json
import os
import time
import uuid
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineError,
    EngineEvent,
    PermanentEngineError,
    Workspace,
)
from containers.engines.follows import EngineStream

ENV_PIECE = 5
FOLLOW_POLL = 0.05  # how often a follow looks whether its container still runs


class FakeEngine:
    stop_removes = False
    honours_node_constraints = False
    reports_cpu = True
    cpu_discovered = False
    start_runs = True

    def __init__(self, base_url: str) -> None:
        self.root = Path(base_url.removeprefix("fake://"))
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "containers").mkdir(exist_ok=True)

    # --- control ------------------------------------------------------------------------

    @contextmanager
    def _locked(self):
        with open(self.root / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _gate(self, op: str, ref: str) -> None:
        with self._locked(), open(self.root / "calls.log", "a") as log:
            log.write(f"{op} {ref} {os.getpid()} {time.time():.6f}\n")
        while (self.root / f"block-{op}").exists():
            time.sleep(0.02)
        delay = self.root / f"delay-{op}"
        if delay.exists():
            time.sleep(float(delay.read_text() or "0"))
        permanent = self.root / f"permanent-{op}"
        if permanent.exists():
            raise PermanentEngineError(permanent.read_text() or f"{op} refused")
        with self._locked():
            fail = self.root / f"fail-{op}"
            if fail.exists():
                left = int(fail.read_text() or "0")
                if left > 0:
                    fail.write_text(str(left - 1))
                    raise EngineError(f"injected {op} failure ({left - 1} left)")

    @staticmethod
    def _read(path: Path) -> dict | None:
        """A container's file, or None if a concurrent ``remove`` unlinked it meanwhile.

        Readers (``inspect``, ``list_ours``) take no lock, like the engine's own reads;
        a file listed by ``glob`` may be gone by the time it is opened.
        """
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None

    def _find(self, ref: str) -> tuple[Path, dict] | None:
        """The file and data of the container named or identified by ``ref``."""
        direct = self.root / "containers" / f"{ref}.json"
        data = self._read(direct)
        if data is not None:
            return direct, data
        for path in (self.root / "containers").glob("*.json"):
            data = self._read(path)
            if data is not None and data["runtime_id"] == ref:
                return path, data
        return None

    def _load(self, ref: str) -> dict | None:
        found = self._find(ref)
        return found[1] if found else None

    def _save(self, data: dict) -> None:
        path = self.root / "containers" / f"{data['name']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, default=str))
        tmp.replace(path)

    def call_records(self, op: str | None = None) -> list[tuple[str, str, int, float]]:
        """Every call so far as ``(op, ref, pid, unix time)``, oldest first."""
        log = self.root / "calls.log"
        records = []
        for line in log.read_text().splitlines() if log.exists() else []:
            name, ref, pid, at = line.split()
            if op is None or name == op:
                records.append((name, ref, int(pid), float(at)))
        return records

    def calls(self, op: str | None = None) -> list[str]:
        """Every call so far as ``"op ref"``, oldest first."""
        return [f"{name} {ref}" for name, ref, _, _ in self.call_records(op)]

    def created(self) -> list[str]:
        """Names of every container actually made (adoptions are not listed)."""
        log = self.root / "created.log"
        return log.read_text().splitlines() if log.exists() else []

    # --- the engine interface -------------------------------------------------------------

    def ping(self) -> bool:
        return not (self.root / "down").exists()

    def check(self, *, timeout: float | None = None) -> None:
        if not self.ping():
            raise EngineError(f"the engine did not answer (the fake engine at {self.root} is down)")

    def node_name(self) -> str:
        return "fake-node"

    def image_present(self, image: str) -> bool:
        return not (self.root / f"missing-image-{image.replace('/', '_')}").exists()

    def ensure_image(self, image: str, pull_policy: str) -> None:
        if not self.image_present(image) and pull_policy == "never":
            raise PermanentEngineError(f"image {image} is missing and pull_policy is never")

    def ensure_workspace(self, workspace: Workspace, *, image: str) -> None:
        """Records the workspace in ``workspaces.log`` (one JSON line per call) and makes
        it, once (``volume_id``)."""
        self._gate("workspace", workspace.source)
        with self._locked(), open(self.root / "workspaces.log", "a") as log:
            log.write(json.dumps(asdict(workspace)) + "\n")
            volume = self._volume_path(workspace.source)
            if not volume.exists():
                volume.parent.mkdir(exist_ok=True)
                volume.write_text(uuid.uuid4().hex)

    def _volume_path(self, name: str) -> Path:
        return self.root / "volumes" / quote(name, safe="")

    def volume_id(self, name: str) -> str | None:
        """The id of the workspace ``name`` (a new one each time it is made); None: none."""
        with self._locked():
            volume = self._volume_path(name)
            return volume.read_text() if volume.exists() else None

    def ensure_network(self, name: str, *, labels: dict[str, str]) -> None:
        self._gate("network", name)

    def workspaces(self) -> list[dict]:
        path = self.root / "workspaces.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def create(self, spec: ContainerSpec) -> str:
        self._gate("create", spec.name)
        self.ensure_image(spec.image, spec.pull_policy)
        with self._locked():
            existing = self._load(spec.name)
            if existing:
                theirs = existing["labels"].get("io.gobrave.instance")
                if theirs != spec.labels.get("io.gobrave.instance"):
                    raise PermanentEngineError(
                        f"create {spec.name}: the name is held by container"
                        f" {existing['runtime_id'][:12]} of instance {theirs!r}"
                    )
                return existing["runtime_id"]
            data = {
                "runtime_id": uuid.uuid4().hex,
                "name": spec.name,
                "labels": spec.labels,
                "status": "created",
                "exit_code": None,
                "spec": asdict(spec),
            }
            self._save(data)
            with open(self.root / "created.log", "a") as log:
                log.write(f"{spec.name}\n")
            self._emit("create", data)
            return data["runtime_id"]

    def start(self, ref: str, spec: ContainerSpec | None = None) -> None:
        self._gate("start", ref)
        with self._locked():
            data = self._load(ref)
            if data is None:
                raise PermanentEngineError(f"container {ref} does not exist")
            exit_file = self.root / "exit-on-start"
            if exit_file.exists():
                data.update(status="exited", exit_code=int(exit_file.read_text() or "0"))
            else:
                data.update(status="running", exit_code=None)
            data["started_at"] = dt.datetime.now(dt.UTC).isoformat()
            self._save(data)
            self._emit("start", data)
            if data["status"] == "exited":
                self._emit("die", data)

    def stop(self, ref: str, timeout: int) -> None:
        self._gate("stop", ref)
        with self._locked():
            data = self._load(ref)
            if data and data["status"] in ("running", "paused"):
                data.update(status="exited", exit_code=0)
                self._save(data)
                self._emit("die", data)
                self._emit("stop", data)

    def remove(self, ref: str) -> None:
        self._gate("remove", ref)
        with self._locked():
            found = self._find(ref)
            if found:
                path, data = found
                path.unlink()
                self._emit("destroy", data)

    def remove_volume(self, name: str) -> None:
        self._gate("remove_volume", name)
        with self._locked(), open(self.root / "volumes-removed.log", "a") as log:
            log.write(f"{name}\n")
            self._volume_path(name).unlink(missing_ok=True)

    def volume_sizes(self, names: list[str]) -> dict[str, int]:
        """What ``volume-sizes.json`` (name: bytes) says, as a test wrote it; nothing else."""
        self._gate("volume_sizes", ",".join(names))
        path = self.root / "volume-sizes.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        return {name: int(known[name]) for name in names if name in known}

    def inspect(self, ref: str) -> ContainerState | None:
        data = self._load(ref)
        if data is None:
            return None
        return ContainerState(
            runtime_id=data["runtime_id"],
            name=data["name"],
            status=data["status"],
            labels=data["labels"],
            exit_code=data["exit_code"],
            oom_killed=bool(data.get("oom_killed")),
            error=data.get("error", ""),
            node_name="fake-node",
        )

    def stats(self, ref: str) -> ContainerStats | None:
        """What ``cpu.json`` says of a running container (``set_cpu``); None otherwise."""
        self._gate("stats", ref)
        data = self._load(ref)
        if data is None or data["status"] != "running":
            return None
        name = data["name"]
        with self._locked():
            now = time.time()
            rate = float(self._cpu_rates().get(name, 0.0))
            if not (self.root / "cpu-counter").exists():
                return ContainerStats(read_at=now, cpu_cores=rate)
            used = self._cpu_used_until(now)
            total = used["ns"].setdefault(name, 0)
            (self.root / "cpu-used.json").write_text(json.dumps(used))
        return ContainerStats(read_at=now, cpu_total_ns=int(total))

    def _cpu_rates(self) -> dict[str, float]:
        path = self.root / "cpu.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _cpu_used_until(self, now: float) -> dict[str, Any]:
        """``cpu-used.json`` (``{"at": epoch, "ns": {name: ns}}``), its sums brought up to
        ``now`` at the current rates (under the lock)."""
        path = self.root / "cpu-used.json"
        known = json.loads(path.read_text()) if path.exists() else {"at": now, "ns": {}}
        rates, elapsed = self._cpu_rates(), max(0.0, now - known["at"])
        sums = {n: ns + int(rates.get(n, 0.0) * elapsed * 1e9) for n, ns in known["ns"].items()}
        return {"at": now, "ns": sums}

    def set_cpu(self, name: str, cores: float) -> None:
        """Make ``stats`` report ``cores`` for the container ``name`` from now on (a
        counter: it grows at that rate from now on)."""
        with self._locked():
            if (self.root / "cpu-counter").exists():
                used = self._cpu_used_until(time.time())
                (self.root / "cpu-used.json").write_text(json.dumps(used))
            path = self.root / "cpu.json"
            known = self._cpu_rates()
            known[name] = cores
            path.write_text(json.dumps(known))

    def count_cpu(self) -> None:
        """Make ``stats`` report a cumulative CPU time (Docker's kind) from now on."""
        (self.root / "cpu-counter").write_text("")

    def stats_served(self, *, timeout: float | None = None) -> bool:
        self.check()
        return True

    def _output(self, data: dict) -> str:
        spec = data.get("spec") or {}
        if spec.get("command") != ["env"]:
            return "fake log line\n"
        return "fake log line\n" + "".join(f"{k}={v}\n" for k, v in (spec.get("env") or {}).items())

    def logs(self, ref: str, tail: int = 100) -> Iterator[bytes]:
        """The last ``tail`` lines of the ``output`` file, 64 KiB at a time (no file: the
        container's one line, and its env for ``["env"]``), read as the caller iterates."""
        data = self._load(ref)
        if data is None:
            return iter(())
        output = self.root / "output"
        if not output.exists():
            return iter([self._output(data).encode()])

        def chunks() -> Iterator[bytes]:
            with open(output, "rb") as handle:
                lines = sum(1 for _ in handle)
                handle.seek(0)
                for _ in range(max(0, lines - tail)):
                    handle.readline()
                while chunk := handle.read(64 * 1024):
                    yield chunk

        return chunks()

    async def follow_logs(self, ref: str, *, tail: int, until: float) -> EngineStream:
        """The fake's one line, then its env in pieces of ``ENV_PIECE`` bytes (a character
        may be split), then nothing new until the container stops or ``until`` passes
        (waiting on the event loop, never blocking it). ``down``: ``EngineError`` at once;
        a missing container: an empty stream."""
        if (self.root / "down").exists():
            raise EngineError(f"logs {ref}: the fake engine is down")
        data = self._load(ref)
        if data is None:
            return EngineStream.empty()
        rest = self._output(data).encode().removeprefix(b"fake log line\n")

        async def chunks() -> AsyncGenerator[bytes, None]:
            yield b"fake log line\n"
            for at in range(0, len(rest), ENV_PIECE):
                yield rest[at : at + ENV_PIECE]
            while (left := until - time.time()) > 0:
                state = self.inspect(ref)
                if state is None or state.status not in ("running", "paused"):
                    return
                await asyncio.sleep(min(FOLLOW_POLL, left))

        return EngineStream(chunks())

    def list_ours(
        self, installation: str, labels: dict[str, str] | None = None
    ) -> list[ContainerState]:
        wanted = {"io.gobrave.installation": installation, **(labels or {})}
        states = []
        for path in sorted((self.root / "containers").glob("*.json")):
            data = self._read(path)
            if data is not None and all(data["labels"].get(k) == v for k, v in wanted.items()):
                states.append(
                    ContainerState(data["runtime_id"], data["name"], data["status"], data["labels"])
                )
        return states

    def event_cursor_now(self) -> str:
        return str(time.time_ns())

    def events(self, installation: str, since: str | None = None) -> Iterator[EngineEvent]:
        """Replay logged events of ``installation`` from the cursor ``since`` (nanoseconds
        as a string, inclusive, as Docker's), then end. Without ``since`` nothing is
        replayed."""
        self._gate("events", installation)
        if not since:
            return iter(())
        since_nano = int(since)
        return iter(
            [
                event
                for event in self.event_log()
                if event.time_nano >= since_nano
                and event.labels.get("io.gobrave.installation") == installation
            ]
        )

    # --- engine-side changes and their events (tests) --------------------------------------

    def _emit(self, action: str, data: dict) -> EngineEvent:
        """Append one event for the container ``data`` (call with the lock held)."""
        event = EngineEvent(
            action=action,
            runtime_id=data["runtime_id"],
            name=data["name"],
            labels=dict(data["labels"]),
            time_nano=time.time_ns(),
            exit_code=data.get("exit_code") if action == "die" else None,
        )
        with open(self.root / "events.log", "a") as log:
            log.write(json.dumps(asdict(event)) + "\n")
        return event

    def event_log(self) -> list[EngineEvent]:
        """Every event so far, oldest first."""
        log = self.root / "events.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [EngineEvent(**json.loads(line)) for line in lines]

    def set_state(
        self,
        ref: str,
        status: str,
        *,
        exit_code: int | None = None,
        oom_killed: bool = False,
        error: str = "",
    ) -> EngineEvent | None:
        """Change a container as the engine would on its own; returns the event it logs.

        ``running`` (start, or unpause when paused), ``paused`` (pause), ``exited``
        (die with ``exit_code``; ``oom`` first when ``oom_killed``).
        """
        with self._locked():
            data = self._load(ref)
            if data is None:
                raise ValueError(f"no container {ref}")
            before = data["status"]
            data.update(status=status, exit_code=exit_code, oom_killed=oom_killed, error=error)
            self._save(data)
            if status == "running":
                return self._emit("unpause" if before == "paused" else "start", data)
            if status == "paused":
                return self._emit("pause", data)
            if status in ("exited", "dead"):
                if oom_killed:
                    self._emit("oom", data)
                return self._emit("die", data)
            return None
