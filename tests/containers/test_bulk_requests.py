"""Many requests in one go (``containers.requests.bulk``, the policy pass's path): each is
an ordinary request (the state machine's move, its history entry, its outbox row), in a
few statements per chunk whatever its size, and a row another transaction holds is left
alone rather than waited for."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from containers.execution.policies import policies_pass
from containers.models import ContainerEvent, ContainerInstance
from containers.requests.bulk import container_requests_bulk
from containers.states import Status
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, TemplateFactory

pytestmark = [pytest.mark.usefixtures("postgres", "only_test_runtimes")]

HOUR = 3600


def rows(*instances) -> list[tuple]:
    """Each instance as it is now, with its requests and its history (to print on failure)."""
    found = []
    for instance in instances:
        row = ContainerInstance.objects.get(pk=instance.pk)
        requests = OutboxEvent.objects.filter(aggregate_id=str(instance.pk)).order_by("id")
        history = ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id")
        found.append(
            (
                row.name,
                row.status,
                [(r.kind, r.payload) for r in requests],
                [(e.actor, e.from_status, e.to_status, e.message) for e in history],
            )
        )
    return found


def reason(instance):
    return f"because {instance.name}", {"rule": "test"}


@pytest.mark.django_db
def test_each_request_of_a_bulk_is_an_ordinary_one_a_repeat_a_noop_a_refusal_nothing(
    fake_runtime,
):
    running = [InstanceFactory(name=f"run{i}", status="running") for i in range(3)]
    already = InstanceFactory(name="already", status="stop_pending")
    starting = InstanceFactory(name="starting", status="starting")
    ids = [each.pk for each in (*running, already, starting)]
    done = container_requests_bulk("stop", instance_ids=ids, actor="policy", why=reason, chunk=2)
    assert sorted(done.queued) == sorted(each.pk for each in running)
    assert done.unchanged == [already.pk]
    assert list(done.refused) == [starting.pk], done.refused
    found = rows(*running, already, starting)
    for name, status, requests, history in found[:3]:
        assert (status, requests, history) == (
            Status.STOP_PENDING,
            [("ContainerStopRequest", {"by": "policy"})],
            [("policy", "running", "stop_pending", f"stop requested: because {name}")],
        ), found
    assert found[3][1:] == ("stop_pending", [], []), found
    assert found[4][1:] == ("starting", [], []), found
    again = container_requests_bulk("stop", instance_ids=ids, actor="policy", why=reason)
    assert (again.queued, len(again.unchanged)) == ([], 4), again


@pytest.mark.django_db
def test_a_bulk_costs_the_same_statements_for_two_requests_as_for_ten(fake_runtime):
    def statements(count: int) -> int:
        made = [InstanceFactory(status="stopped") for _ in range(count)]
        with CaptureQueriesContext(connection) as captured:
            done = container_requests_bulk(
                "delete", instance_ids=[m.pk for m in made], actor="policy", why=reason
            )
        assert len(done.queued) == count, done
        return len(captured.captured_queries)

    few, many = statements(2), statements(10)
    assert few == many, (few, many)


@pytest.mark.django_db(transaction=True)
def test_a_policy_pass_skips_a_row_another_transaction_holds_and_the_next_pass_takes_it(
    fake_runtime,
):
    template = TemplateFactory(name="timed", max_lifetime=HOUR)
    due = timezone.now() - dt.timedelta(minutes=1)
    free, held = (
        InstanceFactory(name=name, template=template, status="running", stop_at=due)
        for name in ("free", "held")
    )
    db = settings.DATABASES["default"]
    other = psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=connection.settings_dict["NAME"]
    )
    try:
        other.execute(
            "SELECT 1 FROM containers_containerinstance WHERE id = %s FOR UPDATE", [held.pk]
        )
        first = policies_pass()  # returns at once: a held row is skipped, not waited for
        assert first.stopped_lifetime == 1, (str(first), rows(free, held))
        assert [row[1] for row in rows(free, held)] == ["stop_pending", "running"], rows(free, held)
    finally:
        other.rollback()
        other.close()
    second = policies_pass()
    assert second.stopped_lifetime == 1, (str(second), rows(free, held))
    assert rows(held)[0][1] == "stop_pending", rows(held)
