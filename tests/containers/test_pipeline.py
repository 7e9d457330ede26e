"""The whole relay with real processes: dispatchers, django-q2 clusters, PostgreSQL.

These tests start ``run_dispatcher`` and ``qcluster`` processes against the test
database and drive them with requests made through the services, on the fake engine
(a directory that every process shares), so the runtime can block, fail or be watched.
"""

from __future__ import annotations

import os
import signal
import time
import zlib
from collections import defaultdict
from contextlib import contextmanager

import pytest
from django.db import close_old_connections, connection

from containers.models import ContainerEvent, ContainerInstance
from containers.queues import RequestKind
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_stop,
)
from containers.requests.slots import slot_count
from outbox.models import OutboxEvent
from outbox.services import outbox_retry_now
from tests.processes import descendants, running_app, sampling, wait_for, wait_running
from tests.processes import outbox_rows as rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BASE = {
    "container_stop_timeout": "1",
    "outbox_poll_interval": "0.2",
    "outbox_backoff_base": "0.3",
    "queue_poll": "0.05",
}


def app_with(tmp_path, **overrides):
    return running_app(tmp_path, **{**BASE, **overrides})


def statuses() -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for status in ContainerInstance.objects.values_list("status", flat=True):
        counts[status] += 1
    return dict(counts)


@contextmanager
def one_create(tmp_path, template, owner, **overrides):
    """A dispatcher and the create cluster (``BASE`` and ``overrides``), and one create
    request made: yields the instance."""
    with app_with(tmp_path, **overrides) as app:
        app.dispatcher()
        app.cluster("create")
        yield container_create_by_template(template=template, owner=owner, actor="t")


def wait_statuses(status: str, count: int, *, timeout: float) -> None:
    """Wait until exactly ``count`` instances are in ``status``."""
    wait_for(
        lambda: statuses().get(status) == count,
        timeout=timeout,
        message=f"{count} {status}",
        describe=rows,
    )


def all_sent() -> bool:
    return not OutboxEvent.objects.exclude(status="sent").exists()


def assert_each_aggregate_ran_in_order() -> None:
    """Rows of one instance started in id order, each after the previous one finished."""
    by_aggregate = defaultdict(list)
    for row in OutboxEvent.objects.order_by("id"):
        by_aggregate[row.aggregate_id].append(row)
    for chain in by_aggregate.values():
        for earlier, later in zip(chain, chain[1:], strict=False):
            assert later.started_at >= earlier.sent_at, (earlier, later)


def assert_each_create_made_one_container_or_was_superseded(engine, instances, early):
    """No container made twice; a create ``sent`` made its container; only the first
    ``early`` instances (deleted while their create may be queued or at work) may see
    their create superseded: before it made the container (none is made) or after (the
    create leaves the container to the delete and does not start it)."""
    created = engine.created()
    assert len(created) == len(set(created)), created
    made = set(created)
    names = {str(instance.pk): f"gb-{instance.pk}" for instance in instances}
    deleted_early = {names[str(instance.pk)] for instance in instances[:early]}
    assert made <= set(names.values()), sorted(made - set(names.values()))
    creates = OutboxEvent.objects.filter(kind=RequestKind.CREATE)
    assert creates.count() == len(instances), rows(creates)
    started = engine.calls("start")
    for row in creates:
        name = names[row.aggregate_id]
        described = rows(OutboxEvent.objects.filter(pk=row.pk))
        if row.outcome == "sent":
            assert name in made, f"create sent but no container made:\n{described}"
        else:
            assert row.outcome == "superseded", described
            assert name in deleted_early, f"superseded, yet never deleted:\n{described}"
    superseded_names = {names[row.aggregate_id] for row in creates.filter(outcome="superseded")}
    assert len(started) == len(set(started)) == len(made - superseded_names), (
        "one start call per container whose create went on",
        started,
    )


def test_two_dispatchers_and_both_clusters_drain_50_instances(
    postgres, tmp_path, template, owner, engine, gobrave_config
):
    gobrave_config(container={"create_queue_max_pending": 500})
    with app_with(
        tmp_path, container_create_queue_max_concurrency=4, queue_control_workers=3
    ) as app:
        app.dispatcher("dispatcher-1")
        app.dispatcher("dispatcher-2")
        app.cluster("create")
        app.cluster("control")
        instances = [
            container_create_by_template(template=template, owner=owner, actor="t")
            for _ in range(50)
        ]
        # 10 of them are deleted while their create may be queued, at work or done.
        for instance in instances[:10]:
            container_delete(instance_id=instance.pk, actor="t")
        wait_statuses("running", 40, timeout=120)
        for instance in instances[10:30]:
            container_stop(instance_id=instance.pk, actor="t")
        wait_statuses("stopped", 20, timeout=120)
        for instance in instances[10:30]:
            container_delete(instance_id=instance.pk, actor="t")
        wait_for(all_sent, timeout=120, message="every row sent", describe=rows)
        assert statuses() == {"running": 20}, statuses()
        assert OutboxEvent.objects.count() == 50 + 10 + 20 + 20
        retried = OutboxEvent.objects.filter(attempts__gt=0)
        assert not retried.exists(), f"rows that failed at least once:\n{rows(retried)}"
        assert_each_create_made_one_container_or_was_superseded(engine, instances, early=10)
        assert len(engine.calls("stop")) == 20
        assert_each_aggregate_ran_in_order()
        deleted = ContainerEvent.objects.filter(kind="ContainerDeleted").count()
        assert deleted == 30
        assert ContainerInstance.objects.count() == 20


def test_capacity_holds_globally_with_more_workers_than_slots(
    postgres, tmp_path, template, owner, engine, gobrave_config
):
    """Two create clusters of 6 workers each, maxConcurrency 3: only the DB gate holds."""
    gobrave_config(container={"create_queue_max_concurrency": 3})
    (engine.root / "block-create").write_text("")
    with app_with(
        tmp_path,
        container_create_queue_max_concurrency=3,
        queue_create_workers=6,
        outbox_max_in_flight=12,
        outbox_delivery_timeout=60,
    ) as app:
        app.dispatcher("dispatcher-1")
        app.dispatcher("dispatcher-2")
        app.cluster("create", "create-cluster-1")
        app.cluster("create", "create-cluster-2")
        for _ in range(30):
            container_create_by_template(template=template, owner=owner, actor="t")
        with sampling(slot_count) as samples:
            deadline = time.monotonic() + 180
            while statuses().get("running", 0) < 30 and time.monotonic() < deadline:
                # Let the blocked creates go in waves once all three slots are taken.
                waiting = ContainerInstance.objects.filter(status="creating").count()
                if waiting >= 3 or statuses().get("pending", 0) == 0:
                    (engine.root / "block-create").unlink(missing_ok=True)
                    time.sleep(0.05)
                    (engine.root / "block-create").write_text("")
                time.sleep(0.05)
            (engine.root / "block-create").unlink(missing_ok=True)
        close_old_connections()
        assert statuses() == {"running": 30}, f"{statuses()}\n{rows()}"
        # A worker writes its row's outcome after the instance is running.
        wait_for(all_sent, timeout=60, message="every row sent", describe=rows)
        assert max(samples) == 3, "the gate must have been tested at full capacity"
        assert all(count <= 3 for count in samples)
        # SPEC section 4 lets the handler's gate defer a create that found no slot (two
        # clusters' claims can meet at the gate); a deferral counts no attempt, so no row
        # failed even once.
        assert set(OutboxEvent.objects.values_list("attempts", flat=True)) == {0}, rows()
        assert len(engine.created()) == 30


def test_worker_killed_mid_handler_is_retried_after_its_lease_without_a_duplicate(
    postgres, tmp_path, template, owner, engine
):
    (engine.root / "block-start").write_text("")
    with one_create(
        tmp_path, template, owner, outbox_delivery_timeout=3, outbox_lease_margin=1
    ) as instance:
        # The worker made the container and is stuck starting it: kill it there.
        [(_, _, pid, _)] = wait_for(
            lambda: engine.call_records("start"), timeout=30, message="start call"
        )
        os.kill(pid, signal.SIGKILL)
        (engine.root / "block-start").unlink()
        wait_running(instance, timeout=60, message="running after the lease expired")
        row = OutboxEvent.objects.get()
        wait_for(lambda: OutboxEvent.objects.get().status == "sent", timeout=10)
        row.refresh_from_db()
        assert row.attempts == 1, rows()
        assert "lease expired" in row.last_error, rows()
        assert engine.created() == [f"gb-{instance.pk}"]  # adopted, never made twice
        assert len(engine.calls("create")) == 2


def test_claims_a_killed_cluster_had_not_begun_go_to_the_next_cluster_at_once(
    postgres, tmp_path, template, owner, engine
):
    """gobrave's broker: a claim pushed to a cluster that dies before a worker begins it
    is still an unstarted claim, and the next pusher of its queue takes it at once, long
    before its lease could run out. Only the handler that had begun waits for its lease."""
    (engine.root / "block-start").write_text("")
    with app_with(
        tmp_path, queue_create_workers=1, outbox_prefetch=2, outbox_delivery_timeout=120
    ) as app:
        app.dispatcher()
        cluster = app.cluster("create")
        instances = [
            container_create_by_template(template=template, owner=owner, actor="t")
            for _ in range(3)
        ]
        # The one worker is stuck starting the first; the other two are claimed and
        # pushed into the cluster's memory, unstarted.
        wait_for(lambda: engine.call_records("start"), timeout=30, message="start call")
        waiting = OutboxEvent.objects.filter(status="processing", started_at__isnull=True)
        wait_for(lambda: waiting.count() == 2, timeout=30, message="2 unstarted claims")
        for pid in [*descendants(cluster.pid), cluster.pid]:
            os.kill(pid, signal.SIGKILL)
        cluster.wait()
        (engine.root / "block-start").unlink()
        app.cluster("create", name="create-cluster-2")
        later = ContainerInstance.objects.filter(pk__in=[i.pk for i in instances[1:]])
        first = OutboxEvent.objects.get(aggregate_id=str(instances[0].pk))
        others = OutboxEvent.objects.exclude(pk=first.pk)
        # An instance is running when its handler commits; its row is marked sent by
        # the outcome's own, later transaction: wait for both.
        wait_for(
            lambda: (
                set(later.values_list("status", flat=True)) == {"running"}
                and not others.exclude(status="sent").exists()
            ),
            timeout=60,  # their claim leases run 390 s: only a fresh push explains this
            message="the two unstarted claims running on the new cluster, their rows sent",
            describe=rows,
        )
        first.refresh_from_db()
        assert (first.status, first.attempts) == ("processing", 0), rows()
        assert set(others.values_list("status", "attempts")) == {("sent", 0)}, rows()


def test_a_cluster_whose_connections_were_cut_runs_the_next_request_at_once(
    postgres, tmp_path, template, owner, engine
):
    """Workers skip the per-task health check: a connection cut under them (as by a
    PostgreSQL restart) fails one statement, which is retried on a fresh connection,
    and the broker reconnects; nothing waits for a lease."""
    with one_create(tmp_path, template, owner, outbox_delivery_timeout=120) as first:
        wait_running(first, timeout=60, message="the first create running")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name IN "
                "('gobrave-test-create-cluster', 'gobrave-broker-create')"
            )
            assert cursor.fetchone()[0] >= 2  # the cluster's connections and its LISTEN
        second = container_create_by_template(template=template, owner=owner, actor="t")
        # Its claim lease runs 150 s: only a working reconnect explains this.
        wait_running(second, timeout=60, message="the second create running after the cut")
        row = OutboxEvent.objects.get(aggregate_id=str(second.pk))
        assert (row.attempts, row.reclaims) == (0, 0), rows()


def test_a_backlog_with_one_worker_never_outlives_a_lease(
    postgres, tmp_path, template, owner, engine, gobrave_config
):
    gobrave_config(container={"create_queue_max_pending": 200, "create_queue_max_concurrency": 1})
    (engine.root / "delay-create").write_text("0.05")
    with app_with(
        tmp_path,
        container_create_queue_max_concurrency=1,
        outbox_delivery_timeout=2,
        outbox_lease_margin=1,
    ) as app:
        for _ in range(100):
            container_create_by_template(template=template, owner=owner, actor="t")
        app.dispatcher()
        app.cluster("create")
        wait_for(all_sent, timeout=180, message="100 rows sent", describe=rows)
        assert set(OutboxEvent.objects.values_list("attempts", flat=True)) == {0}, rows()
        assert not OutboxEvent.objects.filter(last_error__contains="lease").exists(), rows()
        assert len(engine.calls("create")) == 100  # no row was ever run twice


def test_failing_twice_then_succeeding_ends_sent_after_backoff(
    postgres, tmp_path, template, owner, engine
):
    (engine.root / "fail-create").write_text("2")
    with one_create(tmp_path, template, owner, outbox_backoff_base=0.5) as instance:
        wait_for(all_sent, timeout=60, message="sent", describe=rows)
        row = OutboxEvent.objects.get()
        assert (row.status, row.attempts) == ("sent", 2), rows()
        assert ContainerInstance.objects.get(pk=instance.pk).status == "running"
        times = [at for _, _, _, at in engine.call_records("create")]
        assert len(times) == 3
        assert times[1] - times[0] >= 0.5  # backoff(1) = base
        assert times[2] - times[1] >= 1.0  # backoff(2) = 2 * base


def test_always_failing_ends_dead_and_fails_the_instance(
    postgres, tmp_path, template, owner, engine
):
    (engine.root / "fail-create").write_text("99")
    with one_create(
        tmp_path, template, owner, outbox_max_attempts=3, outbox_backoff_base=0.1
    ) as instance:
        wait_for(
            lambda: OutboxEvent.objects.get().status == "dead", timeout=60, message="dead letter"
        )
        row = OutboxEvent.objects.get()
        assert row.attempts == 3, rows()
        assert "injected create failure" in row.last_error, rows()
        stored = ContainerInstance.objects.get(pk=instance.pk)
        assert stored.status == "failed"
        assert "injected create failure" in stored.status_reason


def test_a_create_waiting_for_its_retry_never_holds_back_a_healthy_one(
    postgres, tmp_path, template, owner, engine, gobrave_config
):
    """maxConcurrency 1; the first create fails once and waits a 60 s+ backoff: the
    next create runs meanwhile (contract §4), then the failing one's retry still succeeds."""
    gobrave_config(container={"create_queue_max_concurrency": 1})
    (engine.root / "fail-create").write_text("1")
    with one_create(
        tmp_path, template, owner, container_create_queue_max_concurrency=1, outbox_backoff_base=60
    ) as failing:
        failing_row = OutboxEvent.objects.get(aggregate_id=str(failing.pk))
        wait_for(
            lambda: OutboxEvent.objects.get(pk=failing_row.pk).attempts == 1,
            timeout=60,
            message="the first attempt failed",
            describe=rows,
        )
        healthy = container_create_by_template(template=template, owner=owner, actor="t")
        wait_running(healthy, timeout=60, message="the healthy create running")
        # Still waiting on its backoff: the healthy one did not wait for the retry.
        failing_row.refresh_from_db()
        assert (failing_row.status, failing_row.attempts) == ("pending", 1), rows()
        assert ContainerInstance.objects.get(pk=failing.pk).status == "creating"
        outbox_retry_now(event_id=failing_row.pk)
        wait_for(all_sent, timeout=60, message="the retry sent", describe=rows)
        assert ContainerInstance.objects.get(pk=failing.pk).status == "running", rows()
        failing_row.refresh_from_db()
        assert (failing_row.status, failing_row.attempts) == ("sent", 1), rows()
        assert len(engine.created()) == 2


def test_a_due_retry_stays_pending_while_the_only_slot_is_held_then_runs(
    postgres, tmp_path, template, owner, engine, gobrave_config
):
    """maxConcurrency 1: a create that failed once comes due again while another create
    holds the only slot (blocked in the engine). Claiming the retry would make a second
    slot (contract §4), so the cluster's claims leave it pending, not even deferred, while
    a sampler counting slots never sees two; once the holder runs, the retry runs."""
    gobrave_config(container={"create_queue_max_concurrency": 1})
    (engine.root / "fail-create").write_text("1")

    def create():
        return container_create_by_template(template=template, owner=owner, actor="t")

    def row_of(instance) -> OutboxEvent:
        return OutboxEvent.objects.get(aggregate_id=str(instance.pk))

    with app_with(
        tmp_path,
        container_create_queue_max_concurrency=1,
        # Room for two claims besides the holder: a claim takes the retry (held back by
        # the claim guard) and the fresh create together. With room for one, the retry,
        # the older row, would be the only one a claim looks at while the cap is full
        # (harmless: every create-queue row needs a slot), and nothing would be deferred.
        queue_create_workers=3,
        outbox_backoff_base=60,
    ) as app:
        app.dispatcher()
        app.cluster("create")
        failing = create()
        wait_for(lambda: row_of(failing).attempts == 1, timeout=60, message="failed once")
        (engine.root / "block-create").write_text("")
        holder = create()
        wait_for(
            lambda: len(engine.calls("create")) == 2,
            timeout=60,
            message="the holder in the engine",
            describe=rows,
        )
        with sampling(slot_count) as samples:
            outbox_retry_now(event_id=row_of(failing).pk)
            # Claimed after the retry came due (both committed before it), and deferred
            # by its gate: the claims that took it passed over the retry.
            later = create()
            wait_for(
                lambda: row_of(later).outcome == "deferred",
                timeout=60,
                message="a fresh create claimed and deferred",
                describe=rows,
            )
            retry = row_of(failing)
            assert (retry.status, retry.attempts, retry.outcome) == ("pending", 1, "retried"), (
                rows()
            )
            (engine.root / "block-create").unlink()
            wait_for(all_sent, timeout=60, message="every create sent", describe=rows)
        close_old_connections()
        assert statuses() == {"running": 3}, rows()
        assert row_of(failing).attempts == 1 and row_of(holder).attempts == 0, rows()
        assert samples and max(samples) == 1, (max(samples), rows())


def test_the_redis_broker_carries_the_same_pipeline(postgres, tmp_path, template, owner, engine):
    import redis

    # A Redis db of this run's own (from its test database's name), so two runs on one
    # machine never flush or take each other's queue.
    db = 1 + zlib.crc32(connection.settings_dict["NAME"].encode()) % 15
    broker = f"redis://127.0.0.1:6379/{db}"
    redis.from_url(broker).flushdb()
    with app_with(tmp_path, queue_broker=broker) as app:
        app.dispatcher()
        app.cluster("create")
        app.cluster("control")
        instances = [
            container_create_by_template(template=template, owner=owner, actor="t")
            for _ in range(5)
        ]
        wait_statuses("running", 5, timeout=60)
        for instance in instances:
            container_stop(instance_id=instance.pk, actor="t")
        wait_for(all_sent, timeout=60, message="every row sent", describe=rows)
        assert statuses() == {"stopped": 5}
        assert len(engine.created()) == 5


def test_dispatcher_exits_zero_on_sigterm(postgres, tmp_path):
    with app_with(tmp_path) as app:
        process = app.dispatcher()
        # SIGTERM before Django has loaded would find no handler yet (and kill it).
        app.wait_logged(
            "dispatcher", "started (queues", timeout=120, message="the dispatcher started"
        )
        assert app.stop("dispatcher", timeout=30) == 0
        assert process.returncode == 0


def test_a_cluster_told_to_stop_mid_backlog_stops_chaining_and_loses_nothing(
    postgres, tmp_path, template, owner, engine, gobrave_config
):
    """Workers claim their next row with each outcome (``outbox.chain``), but only in a
    task's first seconds: SIGTERM to the cluster's main during a backlog longer than that
    stops it with the backlog unfinished, every row it began finished, and a new cluster
    runs the rest once each, no attempt counted."""
    gobrave_config(container={"create_queue_max_pending": 500})
    (engine.root / "delay-create").write_text("0.2")
    with app_with(tmp_path) as app:
        app.dispatcher()
        app.cluster("create")
        instances = [
            container_create_by_template(template=template, owner=owner, actor="t")
            for _ in range(60)
        ]
        wait_for(lambda: statuses().get("running", 0) >= 3, timeout=60, message="3 running")
        assert app.stop("create-cluster", timeout=60) == 0
        begun = OutboxEvent.objects.filter(status="processing", started_at__isnull=False)
        assert not begun.exists(), rows(begun)  # each begun row got its outcome
        left = OutboxEvent.objects.filter(status="pending")
        assert left.exists(), rows()  # 60 x 0.2 s over 3 workers: no chain went on so long
        app.cluster("create", name="create-cluster-2")
        wait_statuses("running", 60, timeout=120)
        wait_for(all_sent, timeout=30, message="every row sent", describe=rows)
        failed = OutboxEvent.objects.exclude(attempts=0)
        assert not failed.exists(), rows(failed)
        assert sorted(engine.created()) == sorted(f"gb-{i.pk}" for i in instances)
