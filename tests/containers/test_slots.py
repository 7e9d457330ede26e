"""Slot counting (contract §4) and each engine's usage as the gate runs them: prepared
statements on PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from containers.requests.slots import EngineUsage, engine_usage, slot_count
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory

pytestmark = pytest.mark.django_db


def _request(instance, *, status, lease_seconds=None):
    now = timezone.now()
    return RequestFactory(
        instance=instance,
        status=status,
        available_at=now,
        lease_expires_at=None
        if lease_seconds is None
        else now + dt.timedelta(seconds=lease_seconds),
    )


@pytest.fixture
def instances():
    """One instance in each case that decides whether it holds a slot."""
    made = {
        "leased": InstanceFactory(status="creating"),
        "lease ran out": InstanceFactory(status="starting"),
        "waits for its retry": InstanceFactory(status="creating"),
        "request finished": InstanceFactory(status="starting"),
        "pending": InstanceFactory(status="pending"),
        "running": InstanceFactory(status="running"),
    }
    _request(made["leased"], status="processing", lease_seconds=60)
    _request(made["lease ran out"], status="processing", lease_seconds=-1)
    _request(made["waits for its retry"], status="pending")
    _request(made["request finished"], status="sent")
    return made


def test_only_instances_whose_request_is_in_flight_or_finished_hold_a_slot(postgres, instances):
    # leased and request finished: 2; the others wait, or are not creating/starting.
    assert slot_count() == 2


@pytest.mark.parametrize(
    ("left_out", "expected"),
    [("leased", 1), ("request finished", 1), ("waits for its retry", 2), ("running", 2)],
)
def test_the_instance_asking_is_left_out(postgres, instances, left_out, expected):
    assert slot_count(exclude=instances[left_out].pk) == expected
    assert slot_count(exclude=str(instances[left_out].pk)) == expected


def test_the_count_is_prepared_once_per_connection(postgres, instances):
    for _ in range(3):
        slot_count()
        slot_count(exclude=instances["leased"].pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        counts = [s for (s,) in cursor.fetchall() if s.startswith("SELECT count(*) FROM (")]
    assert len(counts) == 2, counts  # one with the exclusion, one without


def test_each_engines_containers_and_slots_as_the_orm_counts_them(postgres, instances):
    # The fixture's instances each on an engine of their own; beside them, on one engine,
    # a delete under way (no place, no slot) and a running one (a place, no slot).
    shared = RuntimeFactory(name="shared")
    InstanceFactory(status="delete_pending", runtime=shared)
    InstanceFactory(status="deleting", runtime=shared)
    InstanceFactory(status="running", runtime=shared)
    on = {name: made.runtime_id for name, made in instances.items()}
    expected = {
        on["leased"]: EngineUsage(containers=1, slots=1),
        on["lease ran out"]: EngineUsage(containers=1, slots=0),
        on["waits for its retry"]: EngineUsage(containers=1, slots=0),
        on["request finished"]: EngineUsage(containers=1, slots=1),
        on["running"]: EngineUsage(containers=1, slots=0),
        shared.pk: EngineUsage(containers=1, slots=0),
    }  # "pending" is placed nowhere yet: its engine is absent
    for _ in range(2):  # the second time on the compiled, prepared statement
        assert engine_usage() == expected


def test_the_usage_is_prepared_once_per_connection(postgres, instances):
    for _ in range(3):
        engine_usage()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        grouped = [s for (s,) in cursor.fetchall() if "GROUP BY" in s and "runtime_id" in s]
    assert len(grouped) == 1, grouped  # slots_by_runtime, compiled once
