"""Workers that die are found out in seconds; workers that are slow keep their claim.

Real ``run_dispatcher`` and ``qcluster`` processes on the test database and the fake
engine (contract §3 and §4, issue 16 item 2).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from contextlib import contextmanager

import pytest

from containers.models import ContainerInstance
from containers.requests.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.processes import alive, running_app, wait_for, wait_running
from tests.processes import outbox_rows as rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BASE = {"outbox_poll_interval": "0.2", "queue_poll": "0.05"}


@contextmanager
def create_held_in_start(tmp_path, template, owner, engine, **config):
    """A dispatcher and the create cluster (``BASE`` and ``config``) with one create held
    in its runtime's start call: yields the app, the instance and the worker's pid."""
    (engine.root / "block-start").write_text("")
    with running_app(tmp_path, **BASE, **config) as app:
        app.dispatcher()
        app.cluster("create")
        instance = container_create_by_template(template=template, owner=owner, actor="t")
        [(_, _, pid, _)] = wait_for(
            lambda: engine.call_records("start"), timeout=60, message="start call", describe=rows
        )
        yield app, instance, pid


def test_a_busy_worker_killed_mid_create_is_replaced_within_the_liveness_timeout(
    postgres, tmp_path, template, owner, engine
):
    """Default delivery_timeout (300 s, a 330 s lease): the row is due again after the
    20 s liveness timeout, not the lease, and another worker finishes the create."""
    with create_held_in_start(tmp_path, template, owner, engine) as (app, instance, pid):
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        (engine.root / "block-start").unlink()
        # Well under the 330 s lease a dead worker used to pin its row and slot for.
        wait_running(instance, timeout=120, message="running on another worker")
        print(f"recovered {time.monotonic() - killed:.1f}s after the kill")
        wait_for(lambda: OutboxEvent.objects.get().status == "sent", timeout=30, describe=rows)
        row = OutboxEvent.objects.get()
        assert row.attempts == 1 and "lease expired" in row.last_error, rows()
        assert engine.created() == [f"gb-{instance.pk}"]  # adopted, never made twice
        assert {p for _, _, p, _ in engine.call_records("start")} - {pid}, "another worker"


def test_a_slow_but_alive_handler_keeps_its_claim_past_the_liveness_timeout(
    postgres, tmp_path, template, owner, engine
):
    """An 8 s liveness timeout; the handler blocks until its lease was renewed well past
    three liveness timeouts: never reclaimed, one run, no attempt counted."""
    with create_held_in_start(tmp_path, template, owner, engine, outbox_liveness_timeout=8) as (
        _,
        instance,
        _,
    ):
        first = OutboxEvent.objects.get()

        def renewed_past_three_timeouts() -> bool:
            row = OutboxEvent.objects.get()
            return row.lease_expires_at - row.started_at > dt.timedelta(seconds=25)

        wait_for(renewed_past_three_timeouts, timeout=90, message="renewals", describe=rows)
        row = OutboxEvent.objects.get()
        assert (row.status, row.claim_token, row.attempts) == (
            "processing",
            first.claim_token,
            0,
        ), rows()
        (engine.root / "block-start").unlink()
        wait_for(lambda: OutboxEvent.objects.get().status == "sent", timeout=60, describe=rows)
        row = OutboxEvent.objects.get()
        assert (row.attempts, row.last_error) == (0, ""), rows()
        assert ContainerInstance.objects.get(pk=instance.pk).status == "running"
        assert len(engine.calls("create")) == 1 and len(engine.calls("start")) == 1


def test_a_worker_sent_sigterm_mid_create_finishes_it_and_records_the_outcome(
    postgres, tmp_path, template, owner, engine
):
    with create_held_in_start(tmp_path, template, owner, engine, outbox_stop_grace=60) as (
        app,
        instance,
        pid,
    ):
        os.kill(pid, signal.SIGTERM)
        app.wait_logged(
            "create-cluster",
            "SIGTERM mid-handler",
            timeout=30,
            message="the worker noted the SIGTERM",
        )
        assert alive(pid), "the worker must finish its handler first"
        (engine.root / "block-start").unlink()
        wait_for(lambda: not alive(pid), timeout=60, message="the worker exited", describe=rows)
        row = OutboxEvent.objects.get()
        assert (row.status, row.attempts) == ("sent", 0), rows()
        assert ContainerInstance.objects.get(pk=instance.pk).status == "running"
        assert len(engine.calls("start")) == 1


def test_a_worker_past_its_stop_grace_exits_without_an_outcome_and_the_lease_recovers_it(
    postgres, tmp_path, template, owner, engine
):
    with create_held_in_start(
        tmp_path, template, owner, engine, outbox_stop_grace=1, outbox_liveness_timeout=5
    ) as (_, instance, pid):
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not alive(pid), timeout=60, message="the worker gave up", describe=rows)
        row = OutboxEvent.objects.get()
        assert (row.status, row.outcome) == ("processing", ""), rows()  # nothing recorded
        (engine.root / "block-start").unlink()
        wait_running(instance, timeout=120, message="running after the lease")
        wait_for(lambda: OutboxEvent.objects.get().status == "sent", timeout=30, describe=rows)
        assert OutboxEvent.objects.get().attempts == 1, rows()
        assert engine.created() == [f"gb-{instance.pk}"]
