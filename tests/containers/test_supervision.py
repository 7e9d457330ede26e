"""Supervised clusters (``run_cluster``): a dead or wedged cluster is restarted with
nothing lost, and no process of a cluster outlives its main (issue 16 item 1).

Real ``run_dispatcher``, ``run_cluster`` and ``qcluster`` processes on the test database
and the fake engine. A few faults of each kind; the full counts run from
``bench/supervision.py``.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from containers.models import ContainerInstance
from containers.requests.services import container_create_by_template
from core.models import Counter
from outbox.models import OutboxEvent
from tests.processes import alive, descendants, running_app, wait_for
from tests.processes import outbox_rows as rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BASE = {"outbox_poll_interval": "0.2", "queue_poll": "0.05", "outbox_handoff_timeout": "4"}
WORKER = re.compile(r"ready for work at (\d+)")


def workers(log: Path) -> list[int]:
    """The live django-q2 workers named in a cluster's log."""
    return [int(pid) for pid in WORKER.findall(log.read_text()) if alive(int(pid))]


def running(instance) -> bool:
    return ContainerInstance.objects.get(pk=instance.pk).status == "running"


def counter(name: str) -> int:
    return sum(Counter.objects.filter(name=name).values_list("count", flat=True))


def supervised(app):
    return app.start(
        "create-cluster", "run_cluster", "create", "--check-interval", "0.5", "--grace", "3"
    )


def cluster_main(supervisor_pid: int) -> int:
    """The qcluster main process the supervisor runs now."""
    children = [pid for pid in descendants(supervisor_pid) if alive(pid)]
    mains = [
        pid
        for pid in children
        if Path(f"/proc/{pid}/stat").read_text().split()[3] == str(supervisor_pid)
    ]
    assert mains, "no cluster under the supervisor"
    return mains[0]


def test_a_wedged_cluster_is_restarted_and_the_request_it_held_completes(
    postgres, tmp_path, template, owner
):
    """Killing every idle worker wedges django-q2 (the dead one held the task queue's
    read lock): the supervisor sees a claim no worker begins, restarts the cluster and
    hands the claim again; the request completes, its reclaim counted on the row."""
    with running_app(tmp_path, **BASE) as app:
        app.dispatcher()
        supervisor = supervised(app)
        log = app.logdir / "create-cluster.log"
        first = container_create_by_template(template=template, owner=owner, actor="t")
        wait_for(lambda: running(first), timeout=90, message="first running", describe=rows)
        idle = wait_for(lambda: len(workers(log)) >= 3 and workers(log), timeout=30)
        for pid in idle:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        second = container_create_by_template(template=template, owner=owner, actor="t")
        wait_for(lambda: running(second), timeout=120, message="second running", describe=rows)
        print(f"recovered {time.monotonic() - killed:.1f}s after wedging the cluster")
        assert counter("cluster_restarted") >= 1, app.logs()
        row = OutboxEvent.objects.get(aggregate_id=str(second.pk))
        assert row.reclaims >= 1 and "never begun by a worker" in row.last_error, rows()
        assert supervisor.poll() is None


def test_a_killed_cluster_main_takes_every_process_of_its_cluster_with_it(postgres, tmp_path):
    """No supervisor: qcluster's sentinel, workers, monitor and pusher die with their main
    (PR_SET_PDEATHSIG), so none keeps taking tasks beside a new cluster."""
    with running_app(tmp_path, **BASE) as app:
        main = app.cluster("create")
        log = app.logdir / "create-cluster.log"
        wait_for(lambda: len(workers(log)) >= 3, timeout=60, message="workers up")
        # sentinel, 3 workers, monitor, pusher
        below = wait_for(
            lambda: (
                (found := [pid for pid in descendants(main.pid) if alive(pid)])
                and len(found) >= 6
                and found
            ),
            timeout=60,
            message="the whole cluster up",
        )
        os.kill(main.pid, signal.SIGKILL)
        wait_for(
            lambda: not [pid for pid in below if alive(pid)],
            timeout=30,
            message="the cluster's processes gone",
            describe=lambda: str([pid for pid in below if alive(pid)]),
        )


def test_a_killed_cluster_main_is_restarted_under_the_supervisor_and_requests_complete(
    postgres, tmp_path, template, owner
):
    with running_app(tmp_path, **BASE) as app:
        app.dispatcher()
        supervisor = supervised(app)
        log = app.logdir / "create-cluster.log"
        wait_for(lambda: len(workers(log)) >= 3, timeout=60, message="workers up")
        main = cluster_main(supervisor.pid)
        below = [pid for pid in descendants(main) if alive(pid)]
        os.kill(main, signal.SIGKILL)
        killed = time.monotonic()
        instance = container_create_by_template(template=template, owner=owner, actor="t")
        wait_for(lambda: running(instance), timeout=120, message="running", describe=rows)
        print(f"recovered {time.monotonic() - killed:.1f}s after killing the cluster main")
        assert not [pid for pid in below if alive(pid)], "an old cluster process lives on"
        assert cluster_main(supervisor.pid) != main
        assert counter("cluster_restarted") == 1
