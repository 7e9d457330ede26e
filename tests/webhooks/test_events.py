"""Where events happen, their deliveries are written in the same transaction (or, for
"limit hit", from the counters, at most once per period)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from containers.actors import POLICY
from containers.counters import RequestStat
from containers.execution import handlers
from containers.execution.health import runtime_health_record
from containers.models import RuntimeEvent
from containers.requests.bulk import container_requests_bulk
from containers.requests.lifecycle import instance_lock, move
from core.models import Counter
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RuntimeFactory
from webhooks.kinds import DELIVERY_KIND
from webhooks.services import webhook_endpoint_create, webhook_limit_hits_notify

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"  # never connected to: nothing here delivers


def sent_kinds() -> list[tuple[str, dict]]:
    rows = OutboxEvent.objects.filter(kind=DELIVERY_KIND).order_by("id")
    return [(r.payload["type"], r.payload["data"]) for r in rows]


@pytest.fixture
def subscribed(loopback_allowed):
    """An operator's endpoint subscribed to every kind."""
    from webhooks.kinds import EventKind

    return webhook_endpoint_create(url=URL, event_kinds=list(EventKind)).endpoint


def test_a_failed_instance_is_sent_with_its_owner_and_reason(subscribed):
    instance = InstanceFactory(status="running")
    with transaction.atomic():
        move(instance_lock(instance.id), "failed", actor="monitor", reason="exit 3")
    [(kind, data)] = sent_kinds()
    assert kind == "instance.failed"
    assert data["instance"] == str(instance.id) and data["owner_id"] == instance.owner_id
    assert data["reason"] == "exit 3"


def test_a_failure_that_rolls_back_sends_nothing(subscribed):
    instance = InstanceFactory(status="running")
    with pytest.raises(RuntimeError), transaction.atomic():
        move(instance_lock(instance.id), "failed", actor="monitor", reason="exit 3")
        raise RuntimeError("the transaction rolls back")
    assert sent_kinds() == []


def test_a_policy_stop_is_sent_as_culled(subscribed):
    instance = InstanceFactory(status="running")
    with transaction.atomic():
        move(instance_lock(instance.id), "stop_pending", actor=POLICY, message="idle 1h")
    assert [kind for kind, _ in sent_kinds()] == ["instance.culled"]


def test_policy_stops_in_bulk_are_each_sent_to_the_operators_and_only_to_their_owner(
    subscribed,
):
    mine, theirs = InstanceFactory(status="running"), InstanceFactory(status="running")
    own = webhook_endpoint_create(
        url=URL, event_kinds=["instance.culled"], owner=mine.owner
    ).endpoint
    done = container_requests_bulk(
        "stop",
        instance_ids=[mine.pk, theirs.pk],
        actor=POLICY,
        why=lambda instance: ("idle 1h", {}),
    )
    assert sorted(done.queued) == sorted([mine.pk, theirs.pk]), done
    rows = OutboxEvent.objects.filter(kind=DELIVERY_KIND).order_by("id")
    sent = [(r.payload["endpoint"], r.payload["type"], r.payload["data"]["instance"]) for r in rows]
    first, second = sorted([mine, theirs], key=lambda instance: instance.pk)  # lock order
    assert sorted(sent) == sorted(
        [
            (subscribed.pk, "instance.culled", str(first.pk)),
            (subscribed.pk, "instance.culled", str(second.pk)),
            (own.pk, "instance.culled", str(mine.pk)),
        ]
    ), sent
    to_operators = [each for endpoint, _, each in sent if endpoint == subscribed.pk]
    assert to_operators == [str(first.pk), str(second.pk)], sent  # in the order of the moves


def test_a_dead_request_is_sent(subscribed):
    instance = InstanceFactory(status="stopping")
    event = OutboxEvent(id=77, kind="ContainerStopRequest", aggregate_id=str(instance.id))
    with transaction.atomic():
        handlers.on_dead(event, "engine gone")
    kinds = [(kind, data.get("request"), data.get("error")) for kind, data in sent_kinds()]
    assert ("request.dead", 77, "engine gone") in kinds
    assert "instance.failed" in [kind for kind, _ in sent_kinds()]


def test_an_engine_going_away_and_back_is_sent_once_each(subscribed):
    runtime = RuntimeFactory(name="far")
    runtime_health_record(runtime_id=runtime.pk, reachable=True)  # unknown -> reachable
    for _ in range(2):
        runtime_health_record(runtime_id=runtime.pk, reachable=False, error="refused")
    for _ in range(2):
        runtime_health_record(runtime_id=runtime.pk, reachable=True)
    assert [kind for kind, _ in sent_kinds()] == ["engine.unreachable", "engine.reachable"]
    # the engine's history has the same changes, from the same calls
    history = RuntimeEvent.objects.filter(runtime_id=runtime.pk).order_by("id")
    assert [(e.kind, e.message) for e in history] == [
        ("engine.unreachable", "refused"),
        ("engine.reachable", "the engine answers again"),
    ]


def test_limit_hits_are_sent_from_the_counter_once_per_period(subscribed):
    now = timezone.now().replace(second=0, microsecond=0)
    Counter.objects.create(
        minute=now - dt.timedelta(minutes=1), name=RequestStat.CREATE_REFUSED, count=4
    )
    assert webhook_limit_hits_notify(counter=RequestStat.CREATE_REFUSED)
    assert not webhook_limit_hits_notify(counter=RequestStat.CREATE_REFUSED)
    [(kind, data)] = sent_kinds()
    assert (kind, data["count"], data["counter"]) == ("limit.hit", 4, "create_refused")


def test_no_refusals_send_no_limit_hit(subscribed):
    assert not webhook_limit_hits_notify(counter=RequestStat.CREATE_REFUSED)
    assert sent_kinds() == []


def test_a_finished_dag_run_is_sent_to_its_owner_and_operators(subscribed, template, owner):
    from dags.history import run_move
    from dags.models import DagRun
    from dags.services import dag_run_start, dag_template_save

    dag = dag_template_save(name="one", nodes=[{"key": "a", "template": "sleeper"}])
    run = dag_run_start(dag=dag, owner=owner, actor="t")
    with transaction.atomic():
        run_move(DagRun.objects.select_for_update().get(pk=run.pk), "cancelled", actor="t")
    [(kind, data)] = sent_kinds()
    assert (kind, data["dag_run"], data["status"]) == ("dag_run.finished", str(run.pk), "cancelled")
    assert data["owner_id"] == owner.pk
