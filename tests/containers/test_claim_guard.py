"""The create queue's claim guard (contract §4): a row whose instance already holds a
create/start state takes a slot when claimed, so it is let go only within the cap; a
fresh create or start always goes (its handler passes the gate)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from containers.models import ContainerInstance
from containers.requests.placing import claims_within_capacity
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RequestFactory


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
