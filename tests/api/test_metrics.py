"""/metrics: Prometheus text, computed from the database so every process answers the same."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from core.leases import lease_acquire
from core.models import Counter, Lease
from outbox.models import OutboxEvent
from tests.promtool import promtool

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _seed(make_instance):
    for status in ("pending", "pending", "creating", "running", "failed"):
        make_instance(status)
    for status in ("pending", "processing", "dead"):
        OutboxEvent.objects.create(
            kind="ContainerCreateRequest", queue="create", aggregate_id="a", status=status,
            available_at=timezone.now(),
        )  # fmt: skip
    minute = timezone.now().replace(second=0, microsecond=0)
    # Counters as several dispatcher and worker processes leave them: one row per minute.
    Counter.objects.create(minute=minute, name="sent", count=3)
    Counter.objects.create(minute=minute - dt.timedelta(days=1), name="sent", count=4)
    Counter.objects.create(minute=minute, name="create_refused", count=2)
    # Streams: two open, one whose lease expired (its process was killed), another scope.
    for scope, holder in (("stream", "user:1"), ("stream", "user:2"), ("stream", "user:3")):
        lease_acquire(scope=scope, holder=holder, ttl=60, per_holder=None, total=None)
    Lease.objects.filter(holder="user:3").update(expires_at=timezone.now() - dt.timedelta(1))
    lease_acquire(scope="throttle:x", holder="user:1", ttl=60, per_holder=None, total=None)


def test_metrics_in_prometheus_text_format(anon, make_instance, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 9})
    _seed(make_instance)
    response = anon.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = _samples(response.content.decode())
    assert samples[("gobrave_instances", (("status", "pending"),))] == 2
    assert samples[("gobrave_instances", (("status", "stopped"),))] == 0
    assert samples[("gobrave_outbox_rows", (("status", "dead"),))] == 1
    assert samples[("gobrave_queue_pending", ())] == 2
    assert samples[("gobrave_queue_active", ())] == 1
    assert samples[("gobrave_queue_max_pending", ())] == 9
    assert samples[("gobrave_relay_in_flight", ())] == 1
    assert samples[("gobrave_relay_events_total", (("event", "sent"),))] == 7
    assert samples[("gobrave_relay_events_total", (("event", "dead"),))] == 0
    assert samples[("gobrave_requests_total", (("event", "create_refused"),))] == 2
    assert samples[("gobrave_streams_open", ())] == 2, list(Lease.objects.values())


def test_repeated_scrapes_do_not_accumulate(anon, make_instance):
    _seed(make_instance)
    first = _samples(anon.get("/metrics").content.decode())
    second = _samples(anon.get("/metrics").content.decode())
    age = ("gobrave_queue_oldest_pending_age_seconds", ())
    first.pop(age), second.pop(age)
    assert first == second


def test_metrics_refuses_writes(anon):
    assert anon.post("/metrics").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_another_process_serves_the_same_numbers(make_instance):
    """A second web process (a fresh interpreter on the same database) answers the same."""
    _seed(make_instance)
    here = _samples(Client().get("/metrics").content.decode())
    db = connection.settings_dict
    url = f"postgres://{quote(db['USER'])}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/"
    env = {
        **os.environ,
        "DATABASE_URL": url + quote(db["NAME"]),
        "DATABASE_POOL_MAX": "0",
        "DJANGO_ALLOWED_HOSTS": "testserver",  # the test Client's host
        "GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING": str(
            settings.GOBRAVE["container"]["create_queue_max_pending"]
        ),
    }
    script = (
        "import django; django.setup(); from django.test import Client; "
        "print(Client().get('/metrics').content.decode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "DJANGO_SETTINGS_MODULE": "gobrave.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    there = _samples(out)
    age = ("gobrave_queue_oldest_pending_age_seconds", ())
    assert abs(here.pop(age) - there.pop(age)) < 30
    assert here == there


def test_promtool_accepts_the_live_metrics(anon, make_instance, owner):
    _seed(make_instance)
    _dag_run(owner, "running", [("succeeded", 3)])  # a histogram with samples
    text = anon.get("/metrics").content.decode()
    done = promtool("check", "metrics", stdin=text)
    assert done.returncode == 0, done.stdout + done.stderr


def test_engine_health_is_the_cached_check_per_runtime(anon, fake_runtime):
    from containers.models import Runtime
    from tests.factories import RuntimeFactory

    Runtime.objects.filter(pk=fake_runtime.pk).update(health=Runtime.Health.REACHABLE)
    RuntimeFactory(name="far", health=Runtime.Health.UNREACHABLE, enabled=False)
    samples = _samples(anon.get("/metrics").content.decode())
    health = "gobrave_engine_health"
    assert samples[(health, (("runtime", "fake"), ("state", "reachable")))] == 1
    assert samples[(health, (("runtime", "fake"), ("state", "unreachable")))] == 0
    assert samples[(health, (("runtime", "far"), ("state", "unreachable")))] == 1
    assert samples[(health, (("runtime", "far"), ("state", "unknown")))] == 0
    assert samples[("gobrave_engine_enabled", (("runtime", "fake"),))] == 1
    assert samples[("gobrave_engine_enabled", (("runtime", "far"),))] == 0


def test_engine_cordon_and_health_since_per_runtime_pass_promtool(anon, fake_runtime):
    from containers.execution.health import runtime_health_record
    from containers.fleet.services import runtime_cordon
    from containers.models import Runtime
    from tests.factories import RuntimeFactory

    far = RuntimeFactory(name="far")
    runtime_health_record(runtime_id=far.pk, reachable=False, error="connection refused")
    runtime_cordon(runtime_id=far.pk, actor="user:op")
    since = Runtime.objects.get(pk=far.pk).health_since.timestamp()
    text = anon.get("/metrics").content.decode()
    samples = _samples(text)
    assert samples[("gobrave_engine_cordoned", (("runtime", "far"),))] == 1
    assert samples[("gobrave_engine_cordoned", (("runtime", "fake"),))] == 0
    assert samples[("gobrave_engine_health_since_seconds", (("runtime", "far"),))] == since
    # Never checked: no time to give, so no sample (rather than a misleading 0).
    assert ("gobrave_engine_health_since_seconds", (("runtime", "fake"),)) not in samples
    done = promtool("check", "metrics", stdin=text)
    assert done.returncode == 0, done.stdout + done.stderr


def test_instances_and_slots_are_counted_per_engine(anon, make_instance):
    from containers.models import ContainerInstance
    from tests.factories import RuntimeFactory

    far = RuntimeFactory(name="far", max_containers=8, max_concurrency=2)
    for status in ("running", "running", "creating", "creating", "stopped", "delete_pending"):
        make_instance(status)
    moved = [ContainerInstance.objects.filter(status=s).first().pk for s in ("creating", "stopped")]
    ContainerInstance.objects.filter(pk__in=moved).update(runtime=far)
    samples = _samples(anon.get("/metrics").content.decode())
    instances = "gobrave_engine_instances"
    assert samples[(instances, (("runtime", "fake"), ("status", "running")))] == 2
    assert samples[(instances, (("runtime", "far"), ("status", "running")))] == 0
    assert samples[(instances, (("runtime", "far"), ("status", "stopped")))] == 1
    assert samples[("gobrave_engine_slots", (("runtime", "fake"),))] == 1
    assert samples[("gobrave_engine_slots", (("runtime", "far"),))] == 1
    assert samples[("gobrave_queue_active", ())] == 2
    # Load against capacity: containers as max_containers counts them (not being deleted).
    assert samples[("gobrave_engine_containers", (("runtime", "fake"),))] == 3
    assert samples[("gobrave_engine_containers", (("runtime", "far"),))] == 2
    assert samples[("gobrave_engine_capacity_containers", (("runtime", "far"),))] == 8
    assert samples[("gobrave_engine_capacity_slots", (("runtime", "far"),))] == 2
    # No limit of its own: no capacity sample (rather than a misleading 0).
    assert ("gobrave_engine_capacity_containers", (("runtime", "fake"),)) not in samples


def _dag_run(owner, status: str, nodes=()):
    from dags.models import DagNodeRun, DagRun

    run = DagRun.objects.create(owner=owner, template_name="chain")
    DagRun.objects.filter(pk=run.pk).update(status=status)
    start = timezone.now() - dt.timedelta(hours=1)
    for n, (node_status, seconds) in enumerate(nodes):
        node = DagNodeRun.objects.create(run=run, key=f"n{n}")
        DagNodeRun.objects.filter(pk=node.pk).update(
            status=node_status,
            started_at=start if seconds is not None else None,
            finished_at=start + dt.timedelta(seconds=seconds) if seconds is not None else None,
        )
    return run


def test_dag_runs_are_counted_by_status(anon, owner):
    for status in ("running", "running", "succeeded", "failed"):
        _dag_run(owner, status)
    samples = _samples(anon.get("/metrics").content.decode())
    assert samples[("gobrave_dag_runs", (("status", "running"),))] == 2
    assert samples[("gobrave_dag_runs", (("status", "failed"),))] == 1
    assert samples[("gobrave_dag_runs", (("status", "cancelled"),))] == 0


def test_finished_node_durations_are_a_histogram(anon, owner):
    nodes = [("succeeded", 3), ("succeeded", 90), ("failed", 0.5), ("running", None)]
    _dag_run(owner, "running", nodes)
    samples = _samples(anon.get("/metrics").content.decode())
    name = "gobrave_dag_node_duration_seconds"
    ok = (("status", "succeeded"),)
    assert samples[(f"{name}_bucket", (("le", "1.0"), *ok))] == 0
    assert samples[(f"{name}_bucket", (("le", "5.0"), *ok))] == 1
    assert samples[(f"{name}_bucket", (("le", "+Inf"), *ok))] == 2
    assert samples[(f"{name}_count", ok)] == 2
    assert samples[(f"{name}_sum", ok)] == 93
    assert samples[(f"{name}_bucket", (("le", "1.0"), ("status", "failed")))] == 1


def _scrape_queries(anon) -> list[str]:
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert anon.get("/metrics").status_code == 200
    return [q["sql"] for q in queries.captured_queries]


def test_a_scrape_runs_the_same_queries_for_3_and_30_instances(anon, make_instance, owner):
    """What a scrape asks the database does not grow with the rows: no query per
    instance, runtime status or DAG run (the counts come from tallies and indexes)."""
    statuses = ("running", "stopped", "failed")
    for status in statuses:
        make_instance(status)
    _dag_run(owner, "succeeded", [("succeeded", 30)])
    few = _scrape_queries(anon)
    for n in range(27):
        make_instance(statuses[n % 3])
    for _ in range(9):
        _dag_run(owner, "failed", [("failed", 4000)])
    many = _scrape_queries(anon)
    assert len(many) == len(few), "\n".join(many)


def test_the_duration_tally_buckets_by_the_bounds_the_metric_shows():
    """Migration 0005's trigger buckets node durations by its own copy of the bounds."""
    import importlib

    from dags.selectors import NODE_DURATION_BOUNDS

    migration = importlib.import_module("dags.migrations.0006_tallies")
    assert migration.BOUNDS == NODE_DURATION_BOUNDS
