"""The monitor and the reconciler at fleet size (issue 27, item 6).

Private ``dockerd``s (``tests/private_engine.py``, each in a network namespace of its
own; ten started in parallel take about a second together):

- one ``run_monitor`` process, with ``DATABASE_POOL_MAX`` at its default, follows all
  ten: every engine's events reach their instance rows (and move that engine's cursor),
  while the process never needs more database connections than its appliers and
  followers' slots (its followers hold none while they wait), nor more than a few
  threads per engine;
- a reconcile pass that meets a frozen engine (its ``dockerd`` stopped with SIGSTOP: it
  accepts connections and never answers) gives it ``reconcile_engine_timeout`` and
  goes on to the others; the next pass skips it while the call left there still waits.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from containers.execution.health import runtime_health_record
from containers.execution.heartbeat import POOL_THREADS as HEARTBEAT_PINGS
from containers.execution.monitor import FOLLOWER_DB_SLOTS
from containers.execution.reconciler import reconcile
from containers.models import ContainerEvent, ContainerInstance, MonitorCursor, Runtime
from outbox.models import DispatcherBeat
from tests.containers.conftest import EXIT_ON_TERM, IMAGE, _unavailable
from tests.factories import InstanceFactory, TemplateFactory
from tests.private_engine import PrivateDockerd, missing_tools
from tests.processes import running_app, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

ENGINES = 10
APPLIERS = 2  # the monitor's, in this test: its connections are bounded by it


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[PrivateDockerd]]:
    yield from _engines(ENGINES)


@pytest.fixture(scope="module")
def pair() -> Iterator[list[PrivateDockerd]]:
    """Two engines of their own for the reconciler's test (a parallel run that gives it
    to another worker starts two, not ten)."""
    yield from _engines(2)


def _engines(count: int) -> Iterator[list[PrivateDockerd]]:
    if reason := missing_tools():
        _unavailable(reason)
    engines = [PrivateDockerd(f"fleet{i}") for i in range(count)]
    try:
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            list(pool.map(lambda engine: engine.start_with(IMAGE), engines))
        yield engines
    finally:
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            list(pool.map(lambda engine: engine.destroy(), engines))


@pytest.fixture
def installation(postgres, gobrave_config) -> str:
    installation = f"test-{uuid.uuid4().hex[:12]}"
    gobrave_config(container={"installation_id": installation})
    Runtime.objects.all().delete()  # the migration's "local" row is the machine's engine
    return installation


def _place(engine: PrivateDockerd, runtime: Runtime, installation: str, command: str):
    """An instance ``running`` on ``runtime`` whose container (made with the bare SDK,
    labelled as ours) runs ``command``."""
    instance = InstanceFactory(
        status="running", runtime=runtime, template=TemplateFactory(image=IMAGE)
    )
    with engine.client() as client:
        container = client.create_container(
            IMAGE,
            command=["sh", "-c", command],
            name=f"gb-{instance.pk}",
            labels={LABEL_INSTALLATION: installation, LABEL_INSTANCE: str(instance.pk)},
        )
        client.start(container["Id"])
    ContainerInstance.objects.filter(pk=instance.pk).update(container_id=container["Id"])
    return ContainerInstance.objects.get(pk=instance.pk)


def _runtimes(fleet: list[PrivateDockerd]) -> list[Runtime]:
    return [
        Runtime.objects.create(name=f"fleet{i}", driver="docker", base_url=engine.url)
        for i, engine in enumerate(fleet)
    ]


class Sampler:
    """Samples, until stopped, the database connections a process holds (by its
    ``application_name``) and its threads (``/proc``); keeps the highest of each."""

    def __init__(self, application_name: str, pid: int) -> None:
        self.application_name, self.pid = application_name, pid
        self.connections = self.threads = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            while not self.done.wait(0.02):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE application_name = %s AND datname = current_database()",
                        [self.application_name],
                    )
                    self.connections = max(self.connections, cursor.fetchone()[0])
                with contextlib.suppress(OSError):
                    self.threads = max(self.threads, len(os.listdir(f"/proc/{self.pid}/task")))
        finally:
            connection.close()

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


@pytest.mark.slow
def test_one_monitor_follows_ten_engines_within_its_connection_pool(fleet, installation, tmp_path):
    runtimes = _runtimes(fleet)
    instances = [
        _place(engine, runtime, installation, EXIT_ON_TERM)
        for engine, runtime in zip(fleet, runtimes, strict=True)
    ]

    def rows() -> str:
        lines = [
            f"{r.name}: health={r.health} error={r.last_error!r} cursor="
            f"{MonitorCursor.objects.filter(runtime=r).values_list('position', flat=True).first()}"
            for r in Runtime.objects.order_by("name")
        ]
        states = ContainerInstance.objects.filter(pk__in=[i.pk for i in instances])
        lines += [f"{i.runtime.name}: {i.status} {i.status_reason!r}" for i in states]
        return "\n".join(lines)

    # No periodic reconcile: the events alone must move the rows.
    with running_app(
        tmp_path,
        container_installation_id=installation,
        container_reconcile_interval=600,
        container_monitor_appliers=APPLIERS,
    ) as app:
        app.env.pop("DATABASE_POOL_MAX")  # the monitor runs with gobrave's default pool
        name = f"gobrave-test-fleet-{uuid.uuid4().hex[:8]}"  # this process's alone
        process = app.monitor(GOBRAVE_APP_NAME=name)
        with Sampler(name, process.pid) as sampled:
            wait_for(
                lambda: Runtime.objects.filter(health="reachable").count() == ENGINES,
                timeout=30,
                message="all ten streams open",
                describe=rows,
            )
            before = time.time_ns()
            for engine, instance in zip(fleet, instances, strict=True):
                with engine.client() as client:
                    client.kill(instance.container_id, signal="SIGTERM")  # exits 0
            wait_for(
                lambda: ContainerInstance.objects.filter(status="stopped").count() == ENGINES,
                timeout=30,
                message="every engine's exit applied",
                describe=rows,
            )
            # Each engine's own follower applied its events: its cursor moved past them.
            wait_for(
                lambda: (
                    sum(
                        int(position or 0) > before
                        for position in MonitorCursor.objects.values_list("position", flat=True)
                    )
                    == ENGINES
                ),
                timeout=10,
                message="every engine's cursor moved",
                describe=rows,
            )
            # The main thread was never starved of a connection: it still beats.
            stopped_at = max(
                ContainerEvent.objects.filter(to_status="stopped").values_list(
                    "created_at", flat=True
                )
            )
            wait_for(
                lambda: DispatcherBeat.objects.filter(
                    kind="monitor", beat_at__gt=stopped_at
                ).exists(),
                timeout=10,
                message="the monitor's liveness beat after the events",
            )
        assert app.stop("monitor", timeout=15) == 0
    log = (Path(app.logdir) / "monitor.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    for instance in instances:
        entry = ContainerEvent.objects.filter(instance_id=instance.pk, to_status="stopped").get()
        assert entry.from_status == "running", rows()
    # The pool's default is 10; the monitor never needed more than its main thread, its
    # appliers, its followers' slots and its heartbeat (which records each engine's
    # health), for ten engines (one each would have been 11).
    bound = 1 + APPLIERS + FOLLOWER_DB_SLOTS + 1
    assert sampled.connections <= bound, (sampled.connections, bound)
    # One thread per engine, plus a bounded few of its own: the main thread, the
    # appliers, the heartbeat and its pool of pings (however many engines there are).
    fixed = 2 + APPLIERS + HEARTBEAT_PINGS + 4  # (+4: the interpreter's and the SDK's own)
    assert sampled.threads <= ENGINES + fixed, (sampled.threads, ENGINES + fixed)


@pytest.fixture
def frozen(pair) -> Iterator[PrivateDockerd]:
    """The pair's second engine, its dockerd stopped (SIGSTOP): connections are
    accepted, nothing answers. Thawed afterwards."""
    engine = pair[-1]
    os.kill(engine.process.pid, signal.SIGSTOP)
    try:
        yield engine
    finally:
        os.kill(engine.process.pid, signal.SIGCONT)
        wait_for(engine.answers, timeout=30, message="the frozen engine answers again")


def test_a_frozen_engine_costs_a_reconcile_pass_its_timeout_and_holds_up_no_other(
    pair, installation, frozen
):
    healthy_engine = pair[0]
    [healthy] = _runtimes([healthy_engine])
    ice = Runtime.objects.create(name="frozen", driver="docker", base_url=frozen.url)
    exited = _place(healthy_engine, healthy, installation, "exit 0")
    with healthy_engine.client() as client:
        client.wait(exited.container_id, timeout=30)
    waiting = InstanceFactory(status="running", runtime=ice, container_id="on-the-frozen-engine")

    # The frozen engine first: the pass gives it one second and goes on.
    report = reconcile(runtimes=[ice, healthy], installation=installation, engine_timeout=1)

    assert report.changed == 1, str(report)
    assert ContainerInstance.objects.get(pk=exited.pk).status == "stopped"
    assert any(
        "runtime frozen" in e and "did not answer within its 1 s of the pass" in e
        for e in report.errors
    ), report.errors
    row = Runtime.objects.get(pk=ice.pk)
    assert (row.health, ContainerInstance.objects.get(pk=waiting.pk).status) == (
        "unreachable",
        "running",  # never judged blind
    ), row.last_error
    # While the call left there waits, later passes skip the engine at once, and a skip
    # records nothing (here: not undoing a heartbeat that heard the engine meanwhile).
    runtime_health_record(runtime_id=ice.pk, reachable=True, actor="heartbeat")
    report = reconcile(runtimes=[ice, healthy], installation=installation, engine_timeout=1)
    assert any("has not yet answered a call of an earlier pass" in e for e in report.errors), (
        report.errors
    )
    assert report.checked == 1, str(report)
    row = Runtime.objects.get(pk=ice.pk)
    assert row.health == "reachable", (row.health, row.health_since, row.last_error)
