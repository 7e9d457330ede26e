"""Shared plumbing for the benchmarks: a throw-away database, processes, statistics.

Every benchmark makes its own PostgreSQL database (``gobrave_bench_<name>``), migrates
it with ``manage.py migrate``, starts the processes it needs with their own log files,
stops them with SIGTERM on their main pid, and drops the database at the end, also
after a failure or Ctrl-C. Nothing here touches ``test`` or ``test_*`` databases.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
BENCH_SETTINGS = "bench.settings_bench"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _terminate(*_args) -> None:
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _terminate)


# --- the database -----------------------------------------------------------------------


def db_url(name: str) -> str:
    return f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"


def admin_connect(dbname: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=dbname, autocommit=True)


def _check_name(name: str) -> None:
    if not name.startswith("gobrave_bench_") or not name.replace("_", "").isalnum():
        raise SystemExit(f"refusing to create or drop database {name!r}: not a bench database")


def create_database(name: str) -> str:
    _check_name(name)
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return db_url(name)


def drop_database(name: str) -> None:
    _check_name(name)
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The shipped per-owner quotas (config.yml: 10 waiting, 20 live) lifted: benches that load
# the app through one user go far past them (an empty value is no limit).
NO_OWNER_QUOTAS = {"container_max_pending_per_owner": "", "container_max_instances_per_owner": ""}


def app_env(
    url: str, *, settings: str = BENCH_SETTINGS, pool: str | None = "0", **config: object
) -> dict[str, str]:
    """The environment of every gobrave process of a benchmark.

    ``config`` keys are ``section_key`` (``outbox_batch_size``) → ``GOBRAVE_OUTBOX_BATCH_SIZE``;
    upper-case keys are passed as they are. ``pool`` is ``DATABASE_POOL_MAX``: plain
    connections (``0``) as in the tests by default; ``None`` keeps gobrave's default (10).
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOBRAVE_", "BENCH_")) and k != "DJANGO_SETTINGS_MODULE"
    }
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE=settings,
        PYTHONUNBUFFERED="1",
        GOBRAVE_LOG_LEVEL="WARNING",
        # The benchmarks measure admission and the relay, not the API's throttles.
        GOBRAVE_API_THROTTLE_CREATE="",
        GOBRAVE_API_THROTTLE_WRITE="",
    )
    env.pop("DATABASE_POOL_MAX", None)
    if pool is not None:
        env["DATABASE_POOL_MAX"] = pool
    for key, value in config.items():
        if value is None:
            continue
        env[key if key.isupper() else f"GOBRAVE_{key.upper()}"] = str(value)
    return env


def migrate(env: dict[str, str]) -> None:
    result = subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode:
        raise SystemExit(f"migrate failed:\n{result.stdout}\n{result.stderr}")


@contextlib.contextmanager
def bench_database(name: str, *, keep: bool = False) -> Iterator[str]:
    """Create ``gobrave_bench_<name>``, migrate it, yield its URL, drop it at the end."""
    dbname = f"gobrave_bench_{name}"
    url = create_database(dbname)
    try:
        migrate(app_env(url))
        yield url
    finally:
        if keep:
            print(f"(kept database {dbname})")
        else:
            drop_database(dbname)


def django_setup(env: dict[str, str]) -> None:
    """Configure Django in this process with ``env`` (call once, after the migrate)."""
    os.environ.update(env)
    import django

    django.setup()


# --- processes --------------------------------------------------------------------------


class Processes:
    """Named child processes, each logging to its own file; stopped by SIGTERM on the pid."""

    def __init__(self, label: str) -> None:
        self.logdir = Path(tempfile.mkdtemp(prefix=f"gobrave-bench-{label}-"))
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**env, "GOBRAVE_APP_NAME": f"gobrave-bench-{name}"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in the terminal reaches only us; we stop them
        )
        proc.log = log  # type: ignore[attr-defined]
        self.procs[name] = proc
        return proc

    def manage(self, name: str, *args: str, env: dict[str, str]) -> subprocess.Popen:
        return self.start(name, [PYTHON, "manage.py", *args], env)

    def dispatcher(self, env: dict[str, str], name: str = "dispatcher") -> subprocess.Popen:
        return self.manage(name, "run_dispatcher", env=env)

    def cluster(self, queue: str, env: dict[str, str], name: str = "") -> subprocess.Popen:
        return self.manage(
            name or f"{queue}-cluster", "qcluster", env={**env, "Q_CLUSTER_NAME": queue}
        )

    def check(self) -> None:
        """Fail loudly when a child died early."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.logdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, name: str, timeout: float = 20) -> int | None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the main pid only (django-q2 stops cleanly)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"  ({name} ignored SIGTERM for {timeout:g}s; killed)")
                proc.kill()
                proc.wait()
        proc.log.close()  # type: ignore[attr-defined]
        return proc.returncode

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


@contextlib.contextmanager
def processes(label: str) -> Iterator[Processes]:
    procs = Processes(label)
    try:
        yield procs
    except BaseException:
        for name in procs.procs:
            print(f"==== {name} (log {procs.logdir / name}.log)\n{procs.tail(name)}")
        raise
    finally:
        procs.stop_all()


def wait_until(
    predicate: Callable[[], object], *, timeout: float, interval: float = 0.02, what: str = ""
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what or predicate}")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree_cpu_seconds(pid: int, table: dict | None = None) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants, reaped ones included."""
    table = _process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (_, parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += table[current][2] if current in table else 0.0
        todo.extend(children.get(current, []))
    return total


ENGINE_COMMANDS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc")


def _process_table() -> dict[int, tuple[str, int, float]]:
    """Each live process as ``pid -> (command, parent pid, CPU seconds incl. reaped
    children)``."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        cpu = sum(int(value) for value in fields[11:15]) / tick
        table[int(entry.name)] = (head.split("(", 1)[1], int(fields[1]), cpu)
    return table


def cpu_by_part(procs: Processes | None = None) -> dict:
    """CPU seconds so far of each part of a run: each of ``procs``'s children with its
    descendants, PostgreSQL (every ``postgres`` process), the engine (``ENGINE_COMMANDS``)
    and this bench process. Two readings' difference is what a run cost where."""
    table = _process_table()
    parts = {
        name: tree_cpu_seconds(proc.pid, table)
        for name, proc in (procs.procs.items() if procs else [])
    }
    parts["postgres"] = sum(cpu for command, _, cpu in table.values() if command == "postgres")
    parts["engine"] = sum(cpu for command, _, cpu in table.values() if command in ENGINE_COMMANDS)
    parts["bench"] = sum(os.times()[:2])
    parts["machine"] = machine_busy()
    return parts


def machine_busy() -> tuple[float, float]:
    """CPU seconds this machine has been busy and idle (all cores), from /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / tick, idle / tick


def wait_quiet(*, busy_below: float = 0.15, window: float = 0.5, timeout: float = 60) -> float:
    """Wait until the machine's cores were busy less than ``busy_below`` (a share of all
    of them) over ``window`` seconds, e.g. until the kernel has torn down the network
    namespaces of removed containers, which it does after the removal returned. Returns
    the seconds waited (``timeout`` at most)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        busy, idle = machine_busy()
        time.sleep(window)
        busy2, idle2 = machine_busy()
        spent_busy, spent_idle = busy2 - busy, idle2 - idle
        if spent_busy <= busy_below * (spent_busy + spent_idle):
            break
    return time.monotonic() - began


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> str:
    """``name s, ...`` of the CPU seconds each part spent between two ``cpu_by_part``,
    and the machine's busy and idle seconds meanwhile."""
    spent = {name: after[name] - before.get(name, 0.0) for name in after if name != "machine"}
    busy, idle = (a - b for a, b in zip(after["machine"], before["machine"], strict=True))
    return (
        ", ".join(f"{name} {value:.2f}" for name, value in spent.items())
        + f"; machine busy {busy:.2f}, idle {idle:.2f}"
    )


# --- statistics and output ------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(values: list[float]) -> str:
    """``n, p50, p95, p99, max`` of durations given in seconds, printed in ms."""
    if not values:
        return "n=0"
    ms = [v * 1000 for v in values]
    return (
        f"n={len(ms)} p50={percentile(ms, 50):.1f} ms p95={percentile(ms, 95):.1f} ms "
        f"p99={percentile(ms, 99):.1f} ms max={max(ms):.1f} ms mean={statistics.fmean(ms):.1f} ms"
    )


def header(title: str) -> None:
    from importlib.metadata import version

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except Exception:  # noqa: BLE001
            return "-"

    with admin_connect() as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
    print(f"== {title}")
    print(
        f"   {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, PostgreSQL {pg}, Django {v('django')}, "
        f"django-q2 {v('django-q2')}, psycopg {v('psycopg')}, {load()}"
    )


def load() -> str:
    """The machine's load averages (1, 5, 15 min), printed beside every figure: on a shared
    machine a ratio is only comparable to another measured at a similar load."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f}"


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


class EngineEvents:
    """The engine's own clock: every container event (create, start, die, destroy) with
    its ``timeNano``, by container name, read from the events stream in a thread."""

    ACTIONS = ("create", "start", "die", "destroy")

    def __init__(self, client) -> None:
        self.times: dict[str, dict[str, float]] = {}
        self.stream = client.events(decode=True, filters={"type": "container"})
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the stream is closed at the end
            for raw in self.stream:
                action = raw.get("Action") or raw.get("status")
                name = (raw.get("Actor") or {}).get("Attributes", {}).get("name", "")
                if action in self.ACTIONS and name:
                    self.times.setdefault(name, {}).setdefault(action, raw["timeNano"] / 1e9)

    def of(self, name: str, action: str, *, timeout: float = 5.0) -> float:
        deadline = time.monotonic() + timeout
        while action not in self.times.get(name, {}):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {action} event of container {name} from the engine")
            time.sleep(0.01)
        return self.times[name][action]

    def close(self) -> None:
        self.stream.close()


def fake_fixtures(fake_dir: str, **template_fields):
    """An owner ``bench``, a ``fake`` runtime in ``fake_dir`` and a template ``bench`` on it
    (sleep 3600; ``template_fields`` add to it); returns ``(owner, template)``. Needs
    Django set up."""
    from django.contrib.auth.models import User

    from containers.models import ContainerTemplate, Runtime

    owner = User.objects.create_user("bench", password="bench-password-1")
    Runtime.objects.create(
        name="bench-fake", driver="fake", base_url=f"fake://{fake_dir}", labels={"engine": "fake"}
    )
    template = ContainerTemplate.objects.create(
        name="bench",
        image="gobrave-test-busybox:latest",
        command=["sleep", "3600"],
        pull_policy="never",
        constraints={"engine": "fake"},
        **template_fields,
    )
    return owner, template
