"""The create queue's claim guard (contract §4): a row whose instance already holds a
create/start state takes a slot when claimed, so it is let go only within the cap; a
fresh create or start always goes (its handler passes the gate)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from containers.execution.handlers import _begin
from containers.models import ContainerInstance, Runtime
from containers.queues import Queue, RequestKind
from containers.requests.placing import claims_within_capacity
from containers.requests.services import container_create_by_template
from outbox import conf, picking, relay
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory, TemplateFactory
from tests.processes import outbox_rows


def _row(instance, **fields) -> OutboxEvent:
    return RequestFactory(instance=instance, **fields)


@pytest.mark.django_db
def test_a_retry_is_held_back_while_the_cap_is_taken_and_a_fresh_create_is_not(
    postgres, gobrave_config
):
    gobrave_config(container={"create_queue_max_concurrency": 1})
    busy = InstanceFactory(status="creating")  # in flight: holds the one slot
    _row(
        busy,
        status="processing",
        claim_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() + timezone.timedelta(hours=1),
    )
    retry = InstanceFactory(status="creating")  # its row waits for its retry: no slot
    retry_row = _row(retry)
    fresh_row = _row(InstanceFactory(status="pending"))
    rows = [(retry_row.id, retry_row.aggregate_id), (fresh_row.id, fresh_row.aggregate_id)]
    assert claims_within_capacity(rows) == [fresh_row.id]
    ContainerInstance.objects.filter(id=busy.id).update(status="running")  # slot freed
    assert claims_within_capacity(rows) == [retry_row.id, fresh_row.id]


@pytest.mark.django_db
def test_rows_of_no_instance_all_go_without_a_query(postgres, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert claims_within_capacity([(1, "lat-1"), (2, "x")]) == [1, 2]


@pytest.mark.django_db
def test_lapsed_claims_the_guard_refuses_are_parked_and_leave_the_window_to_rows_behind(
    postgres, tmp_path, owner, gobrave_config
):
    """Starts on a disabled engine whose claims ran out (their workers died) fill the
    create queue's claim window; refused, they are parked (``pending``, deferred, their
    lapsed claim counted as a reclaim counts it) instead of being selected first on every
    poll, so the create behind them, which another engine would take, is claimed next."""
    gobrave_config(container={"create_queue_max_concurrency": 100})
    labels = {"engine": "fake", "pool": "p"}
    gone = RuntimeFactory(name="gone", base_url=f"fake://{tmp_path / 'g'}", labels=labels)
    RuntimeFactory(name="open", base_url=f"fake://{tmp_path / 'o'}", labels=labels)
    Runtime.objects.filter(pk=gone.pk).update(enabled=False)
    window = conf.in_flight_limit(Queue.CREATE)
    past = timezone.now() - timezone.timedelta(minutes=5)
    lapsed = [
        _row(
            InstanceFactory(runtime=gone, status="starting", container_id=f"c{i}"),
            kind=RequestKind.START,
            status="processing",
            claim_token="00000000-0000-0000-0000-000000000001",
            lease_expires_at=past,
            started_at=past if i == 0 else None,  # the first one's worker had begun it
        )
        for i in range(max(2, window))
    ]
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    fresh = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay.claim(Queue.CREATE, window) == [], outbox_rows()
    parked = OutboxEvent.objects.filter(pk__in=[row.pk for row in lapsed]).order_by("pk")
    assert {(r.status, r.outcome, r.claim_token, r.started_at) for r in parked} == {
        ("pending", "deferred", None, None)
    }, outbox_rows()
    assert not parked.filter(available_at__lte=timezone.now()).exists(), outbox_rows()
    crashed, *unbegun = parked
    assert (crashed.attempts, crashed.reclaims, crashed.last_error) == (
        1, 0, picking.CRASHED
    ), outbox_rows()  # fmt: skip
    assert {(r.attempts, r.reclaims) for r in unbegun} == {(0, 1)}, outbox_rows()
    reasons = set(ContainerInstance.objects.filter(runtime=gone).values_list("status_reason"))
    assert reasons == {("waiting: engine of runtime gone is disabled",)}, reasons
    claimed = [row_id for row_id, _ in relay.claim(Queue.CREATE, window)]
    created = OutboxEvent.objects.get(aggregate_id=str(fresh.pk))
    assert claimed == [created.pk], outbox_rows()


@pytest.mark.django_db
def test_a_retry_placed_again_but_held_back_by_the_cap_leaves_the_engines_counts_alone(
    postgres, tmp_path, owner, gobrave_config
):
    """A create's retry whose container never came to exist would go from cordoned ``a``
    to ``b`` (one place), but the global cap holds it back: ``b``'s place stays free for
    the fresh create behind it, which goes (its handler then passes the gate)."""
    gobrave_config(container={"create_queue_max_concurrency": 1})
    labels = {"engine": "fake", "pool": "p"}
    a = RuntimeFactory(name="a", base_url=f"fake://{tmp_path / 'a'}", labels=labels)
    RuntimeFactory(name="b", base_url=f"fake://{tmp_path / 'b'}", labels=labels, max_containers=1)
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    moving = container_create_by_template(template=template, owner=owner, actor="t")
    row = OutboxEvent.objects.get(aggregate_id=str(moving.pk))
    assert _begin(row, ready="pending", doing="creating", gated=True).runtime_id == a.pk
    Runtime.objects.filter(pk=a.pk).update(cordoned=True)
    busy = InstanceFactory(status="creating")  # in flight: holds the one slot
    _row(
        busy,
        status="processing",
        claim_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() + timezone.timedelta(hours=1),
    )
    fresh = container_create_by_template(template=template, owner=owner, actor="t")
    fresh_row = OutboxEvent.objects.get(aggregate_id=str(fresh.pk))
    rows = [(row.id, row.aggregate_id), (fresh_row.id, fresh_row.aggregate_id)]
    assert claims_within_capacity(rows) == [fresh_row.id], outbox_rows()
    fresh = ContainerInstance.objects.get(pk=fresh.pk)
    assert (fresh.status, fresh.status_reason) == ("pending", ""), vars(fresh)
    assert OutboxEvent.objects.get(pk=fresh_row.pk).outcome != "deferred", outbox_rows()


@pytest.mark.django_db
def test_the_reasons_of_parked_rows_are_written_one_statement_per_distinct_reason():
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from containers.requests.placing import _reasons_show

    rows = [InstanceFactory(status="pending", runtime=None) for _ in range(6)]
    reasons = {str(r.id): "waiting: no engine with room: a (1/1)" for r in rows[:5]}
    reasons[str(rows[5].id)] = "waiting: no enabled engine matches the constraints gpu=yes"
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        _reasons_show(reasons)
    updates = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 2, updates
    shown = dict(
        ContainerInstance.objects.filter(pk__in=[r.id for r in rows]).values_list(
            "id", "status_reason"
        )
    )
    assert {str(k): v for k, v in shown.items()} == reasons, shown
