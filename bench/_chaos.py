"""The chaos soak's moving parts: traffic, faults, the keeper, the slot sampler.

``bench/chaos_soak.py`` wires them; ``bench/_soak_checks.py`` judges what they left.
Each part runs in a thread of its own with its own database connection, and survives
its database going away (a PostgreSQL restart is one of the faults): a call that fails
on the connection closes it and is tried again on the next turn.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import re
import signal
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from django.db import DatabaseError, InterfaceError, connection, transaction
from supervision import alive, parent

FAULT_KINDS = (
    "idle_worker",
    "busy_worker",
    "cluster_main",
    "dispatcher",
    "monitor",
    "dockerd",
    "postgres",
)
# How long a process manager waits before it starts a part that exited
# (deploy/systemd: Restart=always, RestartSec=2).
RESTART_SEC = 2.0
WORKER_READY = re.compile(r"ready for work at (\d+)")
# A worker logs each move it makes: "<pid> instance <id> <from> -> <to> by worker".
WORKER_MOVE = re.compile(
    r" (\d+) instance ([0-9a-f-]{36}) \w+ -> (creating|starting|stopping|deleting) by worker"
)
DB_ERRORS = (DatabaseError, InterfaceError)


def now() -> dt.datetime:
    """Wall clock, UTC: the soak's PostgreSQL runs on this host, so it is its clock too."""
    return dt.datetime.now(dt.UTC)


def db_call(fn, *args, **kwargs):
    """Run ``fn``; on a lost database close the connection and return None."""
    try:
        return fn(*args, **kwargs)
    except DB_ERRORS:
        with contextlib.suppress(Exception):
            connection.close()
        return None


# --- the cluster logs -------------------------------------------------------------------


class ClusterLog:
    """What a cluster's log says about its workers: their pids, and which one moved
    which instance into a handler state (read incrementally)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.workers: set[int] = set()
        self.moves: dict[str, tuple[int, str]] = {}  # instance -> (pid, state)
        self.lock = threading.Lock()

    def read(self) -> None:
        with self.lock:
            if not self.path.exists():
                return
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
            cut = chunk.rfind(b"\n") + 1
            self.offset += cut
            text = chunk[:cut].decode(errors="replace")
            self.workers.update(int(pid) for pid in WORKER_READY.findall(text))
            for pid, instance, state in WORKER_MOVE.findall(text):
                self.moves[instance] = (int(pid), state)

    def live_workers(self) -> list[int]:
        self.read()
        return sorted(pid for pid in self.workers if alive(pid))


# --- the keeper: a process manager for what the project does not supervise itself --------


@dataclass
class Part:
    name: str
    argv: list[str]
    env: dict[str, str]


class Keeper(threading.Thread):
    """Restarts a part that exited, ``RESTART_SEC`` after it did, as systemd's units
    (``Restart=always``) would. The clusters' own watchdog (``run_cluster``) restarts a
    dead or wedged cluster; the keeper only ever sees ``run_cluster`` exit if the
    watchdog itself died, which it records as an unplanned exit."""

    def __init__(self, procs, parts: list[Part]) -> None:
        super().__init__(daemon=True, name="keeper")
        self.procs, self.parts = procs, {p.name: p for p in parts}
        self.stopping = threading.Event()
        self.expected: set[str] = set()  # parts the fault injector killed
        self.exits: list[dict] = []
        self.back: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def launch_all(self) -> None:
        for part in self.parts.values():
            self.procs.start(part.name, part.argv, part.env)

    def expect_exit(self, name: str) -> threading.Event:
        with self.lock:
            self.expected.add(name)
            self.back[name] = threading.Event()
            return self.back[name]

    def run(self) -> None:
        died: dict[str, float] = {}
        while not self.stopping.wait(0.1):
            for name, part in self.parts.items():
                process = self.procs.procs.get(name)
                if process is None or process.poll() is None:
                    continue
                if name not in died:
                    died[name] = time.monotonic()
                    with self.lock:
                        planned = name in self.expected
                        self.expected.discard(name)
                    self.exits.append(
                        {"part": name, "code": process.returncode, "planned": planned}
                    )
                if time.monotonic() - died[name] >= RESTART_SEC and not self.stopping.is_set():
                    process.log.close()
                    self.procs.start(name, part.argv, part.env)
                    del died[name]
                    with self.lock:
                        event = self.back.pop(name, None)
                    if event is not None:
                        event.set()


# --- the slot sampler -------------------------------------------------------------------


class SlotSampler(threading.Thread):
    """Counts slots as ``containers.requests.slots`` defines them, in one snapshot each time
    (REPEATABLE READ: the instance and outbox reads agree), every ``interval``."""

    def __init__(self, cap: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True, name="slot-sampler")
        self.cap, self.interval = cap, interval
        self.stopping = threading.Event()
        self.samples = 0
        self.highest = 0
        self.over: list[str] = []

    def sample(self) -> bool:
        from containers.models import ContainerInstance
        from containers.requests.slots import slot_count
        from containers.states import ACTIVE_SLOTS
        from outbox.models import OutboxEvent

        with transaction.atomic():
            connection.cursor().execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            held = slot_count()
            if held > self.cap and len(self.over) < 20:
                active = list(
                    ContainerInstance.objects.filter(status__in=ACTIVE_SLOTS).values_list(
                        "id", "status"
                    )
                )
                rows = list(
                    OutboxEvent.objects.filter(aggregate_id__in=[str(i) for i, _ in active])
                    .order_by("id")
                    .values_list("id", "aggregate_id", "kind", "status", "lease_expires_at")
                )
                self.over.append(f"{now():%H:%M:%S.%f} {held} slots > {self.cap}: {active} {rows}")
        self.samples += 1
        self.highest = max(self.highest, held)
        return True

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.interval):
                if db_call(self.sample) is None:
                    self.stopping.wait(0.5)  # the database is away
        finally:
            connection.close()


# --- traffic ----------------------------------------------------------------------------


@dataclass
class Tracked:
    """One instance the traffic made: every request it had accepted, in order."""

    id: str
    owner: str
    accepted: list[str] = field(default_factory=list)  # create, start, stop, delete
    ambiguous: bool = False  # a request whose answer was lost with the connection


class Traffic(threading.Thread):
    """Steady create/start/stop/delete requests from several owners, and DAG runs.

    Picks each request from what the database says now (stop a running instance,
    start a stopped one, delete any), so most are accepted; refusals (409, a full
    queue) are counted by code. A request that fails on the connection is marked
    ambiguous: its outcome is judged from the rows it left.
    """

    def __init__(self, *, owners, template, dag, max_live: int, pace: float, dag_every: float):
        super().__init__(daemon=True, name="traffic")
        self.owners, self.template, self.dag = owners, template, dag
        self.max_live, self.pace, self.dag_every = max_live, pace, dag_every
        self.stopping = threading.Event()
        self.tracked: dict[str, Tracked] = {}
        self.requests: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.dag_runs: list[str] = []
        self.lost = 0  # requests that met a lost database
        self.error = ""

    def _statuses(self) -> dict[str, str]:
        from containers.models import ContainerInstance

        live = [t.id for t in self.tracked.values() if t.accepted[-1:] != ["delete"]]
        return {
            str(pk): status
            for pk, status in ContainerInstance.objects.filter(id__in=live).values_list(
                "id", "status"
            )
        }

    def _choose(self, statuses: dict[str, str]) -> tuple[str, str | None]:
        running = [i for i, s in statuses.items() if s == "running"]
        stopped = [i for i, s in statuses.items() if s == "stopped"]
        deletable = [i for i, s in statuses.items() if s not in ("delete_pending", "deleting")]
        choices = [("stop", running), ("start", stopped), ("delete", deletable)]
        weighted = [(kind, pool) for kind, pool in choices if pool]
        if len(statuses) < self.max_live:
            weighted += [("create", [None])] * 2
        kind, pool = random.choice(weighted)
        return kind, random.choice(pool)

    def request(self, kind: str, instance_id: str | None) -> None:
        from containers.requests import services
        from core.errors import DomainError

        owner = random.choice(self.owners)
        target = instance_id or str(uuid.uuid4())
        tracked = self.tracked.get(target) or Tracked(target, owner.username)
        try:
            if kind == "create":
                services.container_create_by_template(
                    template=self.template, owner=owner, actor="soak", instance_id=target
                )
                queued = True
            else:
                call = getattr(services, f"container_{kind}")
                queued = call(instance_id=target, actor="soak").queued
        except DomainError as error:
            self.refused[getattr(error, "code", type(error).__name__)] += 1
            return
        except DB_ERRORS:
            with contextlib.suppress(Exception):
                connection.close()
            self.lost += 1
            tracked.ambiguous = True
            tracked.accepted.append(kind)  # judged from the rows at the end
            self.tracked[target] = tracked
            return
        if queued:
            tracked.accepted.append(kind)
            self.tracked[target] = tracked
            self.requests[kind] += 1
        else:
            self.requests[f"{kind} (repeat, nothing written)"] += 1

    def start_dag_run(self) -> None:
        from dags.services import dag_run_start

        try:
            run = dag_run_start(dag=self.dag, owner=random.choice(self.owners), actor="soak")
        except DB_ERRORS:
            with contextlib.suppress(Exception):
                connection.close()
            self.lost += 1
            return
        self.dag_runs.append(str(run.pk))
        self.requests["dag_run"] += 1

    def run(self) -> None:
        next_dag = time.monotonic() + self.dag_every / 2
        try:
            while not self.stopping.wait(random.uniform(0.5, 1.5) * self.pace):
                if time.monotonic() >= next_dag:
                    self.start_dag_run()
                    next_dag = time.monotonic() + self.dag_every
                    continue
                statuses = db_call(self._statuses)
                if statuses is None:
                    continue  # the database is away: look again next turn
                self.request(*self._choose(statuses))
        except Exception:  # noqa: BLE001 - reported as a violation of the soak itself
            self.error = traceback.format_exc()
        finally:
            connection.close()


# --- faults -----------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    target: str
    at: dt.datetime
    back_s: float | None = None  # to the process (or server) back
    instance: str = ""  # busy_worker: the request the killed worker held
    queue: str = ""  # the queue it hit ("" for every queue)
    note: str = ""


class Faults(threading.Thread):
    """Injects one fault after another, at random intervals around ``every`` seconds:
    the kinds are drawn as shuffled rounds of all seven, so each appears about as often
    as the others."""

    def __init__(self, *, procs, keeper, logs, engine, postgres, every: float) -> None:
        super().__init__(daemon=True, name="faults")
        self.procs, self.keeper, self.logs = procs, keeper, logs
        self.engine, self.server, self.every = engine, postgres, every
        self.error = ""
        self.stopping = threading.Event()
        self.faults: list[Fault] = []
        self.skipped: Counter[str] = Counter()

    def _cluster_main(self, queue: str) -> int:
        supervisor = self.procs.procs[f"{queue}-cluster"].pid
        for entry in Path("/proc").iterdir():
            pid = int(entry.name) if entry.name.isdigit() else 0
            if pid and parent(pid) == supervisor and alive(pid):
                return pid
        return 0

    def _busy(self, queue: str) -> dict[int, str]:
        """Workers of ``queue`` inside a handler now: pid -> the instance they moved."""
        from containers.models import ContainerInstance

        log = self.logs[queue]
        log.read()
        recent = list(log.moves.items())[-50:]
        now_in = dict(
            ContainerInstance.objects.filter(pk__in=[i for i, _ in recent]).values_list(
                "id", "status"
            )
        )
        return {
            pid: instance
            for instance, (pid, state) in recent
            if now_in.get(uuid.UUID(instance)) == state and alive(pid)
        }

    def idle_worker(self) -> Fault | None:
        queue = random.choice(list(self.logs))
        busy = db_call(self._busy, queue)
        if busy is None:
            return None
        idle = [pid for pid in self.logs[queue].live_workers() if pid not in busy]
        if not idle:
            return None
        victim = random.choice(idle)
        os.kill(victim, signal.SIGKILL)
        return Fault("idle_worker", f"{queue} worker {victim}", now(), queue=queue)

    def busy_worker(self) -> Fault | None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self.stopping.is_set():
            for queue in random.sample(list(self.logs), len(self.logs)):
                busy = db_call(self._busy, queue)
                if busy:
                    pid, instance = random.choice(sorted(busy.items()))
                    os.kill(pid, signal.SIGKILL)
                    return Fault(
                        "busy_worker", f"{queue} worker {pid}", now(), instance=instance,
                        queue=queue,
                    )  # fmt: skip
            time.sleep(0.02)
        return None

    def cluster_main(self) -> Fault | None:
        queue = random.choice(list(self.logs))
        victim = self._cluster_main(queue)
        if not victim:
            return None
        os.kill(victim, signal.SIGKILL)
        fault = Fault("cluster_main", f"{queue} qcluster {victim}", now(), queue=queue)
        began = time.monotonic()
        while time.monotonic() - began < 300:
            current = self._cluster_main(queue)
            if current and current != victim:
                fault.back_s = time.monotonic() - began
                break
            time.sleep(0.05)
        return fault

    def _part(self, kind: str, name: str) -> Fault | None:
        process = self.procs.procs.get(name)
        if process is None or process.poll() is not None:
            return None
        back = self.keeper.expect_exit(name)
        process.send_signal(signal.SIGKILL)
        fault = Fault(kind, f"{name} {process.pid}", now())
        began = time.monotonic()
        if back.wait(120):
            fault.back_s = time.monotonic() - began
        return fault

    def dispatcher(self) -> Fault | None:
        return self._part("dispatcher", random.choice(["dispatcher-1", "dispatcher-2"]))

    def monitor(self) -> Fault | None:
        return self._part("monitor", "monitor")

    def dockerd(self) -> Fault | None:
        fault = Fault("dockerd", f"private dockerd {self.engine.process.pid}", now())
        fault.back_s = self.engine.restart(down_for=random.uniform(1, 3))
        fault.note = f"new pid {self.engine.process.pid}"
        return fault

    def postgres(self) -> Fault | None:
        fault = Fault("postgres", f"private PostgreSQL :{self.server.port}", now())
        began = time.monotonic()
        self.server.stop()
        time.sleep(random.uniform(1, 3))
        self.server.start()
        fault.back_s = time.monotonic() - began
        return fault

    def run(self) -> None:
        round_: list[str] = []
        try:
            while not self.stopping.wait(random.uniform(0.5, 1.5) * self.every):
                if not round_:
                    round_ = random.sample(FAULT_KINDS, len(FAULT_KINDS))
                kind = round_.pop()
                fault = getattr(self, kind)()
                if fault is None:
                    self.skipped[kind] += 1
                    round_.append(kind)  # try that kind again next time
                    continue
                self.faults.append(fault)
                back = "" if fault.back_s is None else f", back after {fault.back_s:.1f}s"
                print(f"   {fault.at:%H:%M:%S} fault {kind}: {fault.target}{back}", flush=True)
        except Exception:  # noqa: BLE001 - reported as a violation of the soak itself
            self.error = traceback.format_exc()
        finally:
            connection.close()
