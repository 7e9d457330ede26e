"""Run the real app processes (dispatchers, django-q2 clusters, monitor) in tests.

The processes use the test database that pytest-django made (so the test must use a
transactional database), and the same config overrides the test passes in ``env``
(``GOBRAVE_<SECTION>_<KEY>``). Each process logs to its own file; on failure the tail
of every log is printed. Processes are stopped with SIGTERM on their main pid (django-q2
clusters stop cleanly that way), then killed if they linger.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from django.db import connection

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent

# Waits end when their condition holds, so a generous bound costs a passing test nothing;
# it only keeps a loaded 2-core CI machine from failing a test that was merely slow.
# GOBRAVE_TEST_PATIENCE scales every bound given to ``wait_for`` (default 3).
PATIENCE = float(os.environ.get("GOBRAVE_TEST_PATIENCE", "3"))
MAX_SCALED_WAIT = 240.0


def free_port() -> int:
    """A loopback port nothing listens on (the kernel's pick, closed again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_answers(url: str) -> bool:
    """True when ``url`` answers 200 now (a server a test started is up); never raises."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:  # urllib.error.URLError is one
        return False


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def current_database_url() -> str:
    """A DATABASE_URL for the database this test process is using."""
    params = connection.settings_dict
    auth = params["USER"] + (f":{params['PASSWORD']}" if params["PASSWORD"] else "")
    host, port = params["HOST"] or "127.0.0.1", params["PORT"] or 5432
    return f"postgres://{auth}@{host}:{port}/{params['NAME']}"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), deepest first."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found[::-1]


def alive(pid: int) -> bool:
    """True unless the process is gone or a zombie (dead, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class App:
    logdir: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, *args: str, **extra_env: str) -> subprocess.Popen:
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        process = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env={**self.env, "GOBRAVE_APP_NAME": f"gobrave-test-{name}", **extra_env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        process.log = log  # type: ignore[attr-defined]
        self.processes[name] = process
        return process

    def web(self, name: str = "web", **extra_env: str) -> int:
        """Start the web server exactly as ``make run`` does (scripts/run_all.py: gunicorn
        with uvicorn's ASGI workers), on a free loopback port with a control socket of
        its own; return the port once it answers."""
        run_all = _load_script("run_all")
        command, env = run_all.parts()["web"]
        port = free_port()
        command = list(command)
        command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
        command[command.index("--control-socket") + 1] = str(self.logdir / f"{name}.ctl")
        log = open(self.logdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**self.env, **env, "GOBRAVE_APP_NAME": f"gobrave-test-{name}", **extra_env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        process.log = log  # type: ignore[attr-defined]
        self.processes[name] = process

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the web server exited:\n{self.logs()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return True
            return False

        wait_for(answers, timeout=60, message="the web server listens")
        return port

    def dispatcher(self, name: str = "dispatcher") -> subprocess.Popen:
        return self.start(name, "run_dispatcher")

    def cluster(self, queue: str, name: str | None = None, **extra_env: str) -> subprocess.Popen:
        return self.start(name or f"{queue}-cluster", "qcluster", Q_CLUSTER_NAME=queue, **extra_env)

    def monitor(self, name: str = "monitor", **extra_env: str) -> subprocess.Popen:
        """Start ``run_monitor`` (event follower and periodic reconciler)."""
        return self.start(name, "run_monitor", **extra_env)

    def manage(
        self, *args: str, timeout: float = 60, **extra_env: str
    ) -> subprocess.CompletedProcess:
        """Run a one-shot ``manage.py`` command with this app's env; returns its result."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env={**self.env, "GOBRAVE_APP_NAME": f"gobrave-test-{args[0]}", **extra_env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self, name: str, timeout: float = 20) -> int | None:
        process = self.processes.pop(name)
        if process.poll() is None:
            below = descendants(process.pid)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            # A main process that had to be killed leaves its children behind (a wedged
            # cluster's workers); never let them outlive the test.
            for pid in below:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        process.log.close()  # type: ignore[attr-defined]
        return process.returncode

    def wait_logged(self, name: str, text: str, *, timeout: float, message: str = "") -> None:
        """Wait until ``text`` stands in the log of the process ``name``."""
        log = self.logdir / f"{name}.log"
        wait_for(lambda: text in log.read_text(), timeout=timeout, message=message or text)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def logs(self, lines: int = 40) -> str:
        out = []
        for path in sorted(self.logdir.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"==== {path.name}\n" + "\n".join(tail))
        return "\n".join(out)


@contextmanager
def running_app(tmp_path: Path, **config: object) -> Iterator[App]:
    """Yield an ``App`` whose processes share this test's database and config.

    ``config`` keys are ``section_key`` names (``container_create_queue_max_concurrency``)
    passed to every process as ``GOBRAVE_<SECTION>_<KEY>``.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOBRAVE_")}
    if os.environ.get("GOBRAVE_CONFIG"):
        env["GOBRAVE_CONFIG"] = os.environ["GOBRAVE_CONFIG"]
    env["DATABASE_URL"] = current_database_url()
    env["DATABASE_POOL_MAX"] = "0"  # worker processes fork: plain connections
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in config.items():
        env[f"GOBRAVE_{key.upper()}"] = str(value)
    logdir = tmp_path / "logs"
    logdir.mkdir(exist_ok=True)
    app = App(logdir=logdir, env=env)
    try:
        yield app
    except BaseException:
        print(app.logs())
        raise
    finally:
        app.stop_all()


def wait_for(
    predicate, *, timeout: float, interval: float = 0.05, message: str = "", describe=None
):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``
    (scaled by ``PATIENCE``).

    ``describe`` (a callable returning text, e.g. the rows' status, attempts and last
    error) is added to the failure, so a timeout says what the rows said.
    """
    # Scaled, but kept under the suite's 300 s per-test timeout (unless the test asked for
    # more itself), so a real failure still ends here and prints what the rows say.
    timeout = max(timeout, min(timeout * PATIENCE, MAX_SCALED_WAIT))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    detail = f"\n{describe()}" if describe is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}{detail}")


def wait_running(instance, *, timeout: float, message: str) -> None:
    """Wait until the container instance is ``running``; a timeout shows the outbox rows."""
    from containers.models import ContainerInstance

    wait_for(
        lambda: ContainerInstance.objects.get(pk=instance.pk).status == "running",
        timeout=timeout,
        message=message,
        describe=outbox_rows,
    )


def outbox_rows(queryset=None) -> str:
    """What the outbox rows say, for assertion messages: id, kind, instance, status and
    outcome, attempts, reclaims, lease, start and the end of the last error."""
    from outbox.models import OutboxEvent

    queryset = OutboxEvent.objects.all() if queryset is None else queryset
    return "\n".join(
        f"#{r.id} {r.kind} {r.aggregate_id} {r.status}/{r.outcome} attempts={r.attempts} "
        f"reclaims={r.reclaims} lease={r.lease_expires_at} started={r.started_at} "
        f"last_error={r.last_error.strip()[-600:]!r}"
        for r in queryset.order_by("id")
    )


@contextmanager
def sampling(measure: Callable[[], T], interval: float = 0.003) -> Iterator[list[T]]:
    """Call ``measure()`` every ``interval`` in a thread of its own (with its own database
    connection, closed at the end) while the block runs; yields the list it fills."""
    samples: list[T] = []
    done = threading.Event()

    def sample() -> None:
        try:
            while not done.is_set():
                samples.append(measure())
                time.sleep(interval)
        finally:
            connection.close()

    thread = threading.Thread(target=sample, name="sampler", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join(60)


@dataclass
class RelayWork:
    """What ``relay_workers``' threads did: each request's outcome, counted, and each
    error a thread ended on (a deadlock or anything else), as ``repr``."""

    outcomes: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)


@contextmanager
def relay_workers(count: int, queue: str = "create", batch: int = 2) -> Iterator[RelayWork]:
    """``count`` threads that claim up to ``batch`` due rows of ``queue`` and execute them
    (``relay.claim`` and ``relay.execute``, as a cluster's workers do, each thread with
    its own database connection, closed at the end) while the block runs, polling every
    10 ms when nothing is due; a thread that meets an error records it and ends."""
    from outbox import relay

    work = RelayWork()
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set():
                claimed = relay.claim(queue, batch)
                for event_id, token in claimed:
                    work.outcomes[relay.execute(event_id, token)] += 1
                if not claimed:
                    stop.wait(0.01)  # nothing due: the next poll
        except Exception as exc:  # noqa: BLE001 - a deadlock or any error fails the test
            work.errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, name=f"relay-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield work
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def released_at_once(call: Callable[[int], T], count: int, *, timeout: float = 120) -> list[T]:
    """Run ``call(0)`` ... ``call(count - 1)`` in as many threads, released together (a
    barrier), and return what they returned, in the order they finished. ``call`` turns
    its own errors into answers and closes any database connection it opened."""
    barrier = threading.Barrier(count)
    answers: list[T] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        barrier.wait(timeout=60)
        answer = call(index)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return answers


def relay_drain(rounds: int = 20) -> list[str]:
    """Claim and execute in this process until nothing is claimable (both queues);
    returns every outcome in order."""
    from outbox import relay

    outcomes = []
    for _ in range(rounds):
        claimed = [(q, c) for q in ("create", "control") for c in relay.claim(q, 16)]
        if not claimed:
            break
        outcomes += [relay.execute(event_id, token) for _, (event_id, token) in claimed]
    return outcomes
