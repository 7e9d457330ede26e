"""``manage.py health``: a process of this host is healthy while its liveness mark is fresh.

The marks are written by the writers the processes use (``outbox.liveness.process_beat``
under ``beat_name``), on the real database; staleness is set on the database's clock.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import socket
import subprocess
import sys
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models.functions import Now

from outbox import liveness
from outbox.models import DispatcherBeat
from tests.processes import REPO, current_database_url, free_port

pytestmark = pytest.mark.django_db

KINDS = {
    ("dispatcher",): liveness.DISPATCHER,
    ("monitor",): liveness.MONITOR,
    ("cluster", "create"): liveness.cluster_kind("create"),
    ("cluster", "control"): liveness.cluster_kind("control"),
}


def beat(kind: str) -> str:
    """One beat of a process of this host, as the process itself writes it."""
    name = liveness.beat_name(kind)
    liveness.process_beat(name=name, kind=kind)
    return name


def health(*argv: str) -> tuple[int, str]:
    """(exit code, the line printed) of ``manage.py health ARGV``."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("health", *argv, stdout=out, stderr=err)
    except SystemExit as stop:
        return int(stop.code), err.getvalue().strip()
    except CommandError as error:
        return error.returncode, str(error)
    return 0, out.getvalue().strip()


@pytest.mark.parametrize("argv", list(KINDS), ids=" ".join)
def test_a_fresh_mark_of_this_host_is_healthy(postgres, argv):
    beat(KINDS[argv])
    code, line = health(*argv)
    assert code == 0, line
    assert line.startswith("ok: ") and socket.gethostname() in line


@pytest.mark.parametrize("argv", list(KINDS), ids=" ".join)
def test_a_mark_older_than_max_age_is_unhealthy_with_its_age(postgres, argv):
    name = beat(KINDS[argv])
    DispatcherBeat.objects.filter(name=name).update(beat_at=Now() - dt.timedelta(minutes=2))
    code, line = health(*argv, "--max-age", "60")
    assert code == 1, line
    assert re.fullmatch(r"unhealthy: .+ on \S+: last beat 1[12]\d\.\d s ago \(max 60 s\)", line)


def test_the_default_max_age_is_the_window_a_process_counts_as_alive(postgres, gobrave_config):
    gobrave_config(outbox={"poll_interval": 1})
    name = beat(liveness.DISPATCHER)
    window = liveness.alive_window()
    assert window == dt.timedelta(seconds=liveness.COLD_AFTER)
    DispatcherBeat.objects.filter(name=name).update(beat_at=Now() - window / 2)
    assert health("dispatcher")[0] == 0
    DispatcherBeat.objects.filter(name=name).update(beat_at=Now() - window * 2)
    code, line = health("dispatcher")
    assert code == 1 and "max 10 s" in line, line


def test_a_process_that_never_beat_here_is_unhealthy():
    code, line = health("monitor")
    assert code == 1
    assert "no liveness mark" in line


def test_another_hosts_mark_counts_only_with_any_host(postgres):
    DispatcherBeat.objects.create(
        name=f"{liveness.mark_prefix(liveness.MONITOR, 'other-host')}1:abc",
        kind=liveness.MONITOR,
        started_at=Now(),
        beat_at=Now(),
    )
    assert health("monitor")[0] == 1
    assert health("monitor", "--host", "other-host")[0] == 0
    assert health("monitor", "--any-host")[0] == 0


def test_one_clusters_mark_says_nothing_of_the_other(postgres):
    beat(liveness.cluster_kind("create"))
    assert health("cluster", "create")[0] == 0
    assert health("cluster", "control")[0] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("cluster",), "cluster needs its queue"),
        (("cluster", "nosuch"), "cluster needs its queue"),
        (("dispatcher", "create"), "takes no queue"),
        (("monitor", "--max-age", "0"), "--max-age must be a positive"),
        (("monitor", "--wait", "-1"), "--wait must be zero or more"),
    ],
)
def test_usage_errors_exit_2_and_say_what_is_wrong(argv, message):
    code, line = health(*argv)
    assert code == 2
    assert message in line


def test_clusters_on_a_broker_that_writes_no_mark_are_refused_clearly(settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "broker_class": None, "redis": "redis://x"}
    code, line = health("cluster", "create")
    assert code == 2
    assert "database broker" in line


@pytest.mark.django_db(transaction=True)
def test_the_command_line_exits_1_with_one_line_on_a_stale_mark(postgres):
    """The probes run it as a process: its exit code is the answer."""
    name = beat(liveness.DISPATCHER)
    DispatcherBeat.objects.filter(name=name).update(beat_at=Now() - dt.timedelta(minutes=5))
    env = {**os.environ, "DATABASE_URL": current_database_url(), "DATABASE_POOL_MAX": "0"}
    argv = [sys.executable, "manage.py", "health", "dispatcher", "--max-age", "60"]
    stale = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert stale.stderr.strip().startswith("unhealthy: dispatcher on "), stale.stderr
    assert len(stale.stderr.strip().splitlines()) == 1, stale.stderr


DATABASE_DOWN = """
import django
django.setup()
from django.core.management import execute_from_command_line
from django.db import connection
print("pool", "pool" in connection.settings_dict["OPTIONS"])
for flags in ([], ["--ok-if-database-down"]):  # as manage.py runs it, twice in one process
    try:
        execute_from_command_line(["manage.py", "health", "monitor", *flags])
        print("exit 0")
    except SystemExit as stop:
        print("exit", stop.code)
print("pool", "pool" in connection.settings_dict["OPTIONS"])
"""


def test_a_database_that_does_not_answer_fails_the_check_unless_asked_to_pass():
    """Liveness passes it (a database outage restarts no process), readiness does not; the
    check connects directly, not through the pool (which would hold it for 30 s)."""
    env = {**os.environ, "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/gobrave"}
    env.pop("DATABASE_POOL_MAX", None)  # the pool is on, as in production
    done = subprocess.run(
        [sys.executable, "-c", DATABASE_DOWN],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    unknown = (
        f"unknown: monitor on {socket.gethostname()}: cannot read the marks (OperationalError)"
    )
    assert done.stdout.splitlines() == [
        "pool True",  # the process's settings have the pool on ...
        "exit 1",
        f"{unknown}; passing (--ok-if-database-down)",
        "exit 0",
        "pool False",  # ... and the check connected without it
    ], done.stdout + done.stderr
    assert done.stderr.strip() == unknown


@pytest.mark.django_db(transaction=True)
def test_wait_passes_once_the_process_beats_after_the_first_look(postgres, monkeypatch):
    """The systemd units' start check: the mark comes after the check began."""
    from outbox.management.commands import health as command

    looked = threading.Event()
    real = command.mark_age

    def spied(**kwargs):
        age = real(**kwargs)
        looked.set()
        return age

    monkeypatch.setattr(command, "mark_age", spied)

    def process_starts() -> None:
        looked.wait(timeout=60)
        try:
            beat(liveness.MONITOR)  # its own connection, committed
        finally:
            connection.close()

    writer = threading.Thread(target=process_starts)
    writer.start()
    try:
        code, line = health("monitor", "--wait", "60")
    finally:
        writer.join(timeout=60)
    assert code == 0, line
