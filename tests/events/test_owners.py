"""History entries carry their owner: new ones from their instance or run, and those
written before the column existed from migrations containers 0021 and dags 0007, in
batches (``core.batches.update_in_batches``)."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.apps import apps

from containers.models import ContainerEvent
from dags.models import DagEvent, DagNodeRun, DagRun
from tests.factories import InstanceFactory, UserFactory

pytestmark = pytest.mark.django_db


def _entry(instance_id, kind="transition", actor="worker") -> ContainerEvent:
    return ContainerEvent.objects.create(instance_id=instance_id, kind=kind, actor=actor)


def test_entries_get_their_instances_owner_or_their_creators(monkeypatch):
    migration = importlib.import_module("containers.migrations.0027_event_owner_backfill")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches over a few rows
    alice = UserFactory(username="bf-alice")
    live = InstanceFactory()
    deleted, by_runner = uuid.uuid4(), uuid.uuid4()
    of_live = [_entry(live.id) for _ in range(3)]
    of_deleted = [
        _entry(deleted, kind="ContainerCreateRequest", actor="user:bf-alice"),
        _entry(deleted, kind="ContainerDeleted"),
    ]
    of_runner = _entry(by_runner, kind="ContainerCreateRequest", actor="dag-runner")
    ContainerEvent.objects.update(owner=None)
    migration.backfill(apps, None)
    owners = dict(ContainerEvent.objects.values_list("id", "owner_id"))
    assert {owners[e.id] for e in of_live} == {live.owner_id}
    assert {owners[e.id] for e in of_deleted} == {alice.pk}
    assert owners[of_runner.id] is None  # operators see it; its run's history has the owner


def test_dag_entries_get_their_runs_owner():
    migration = importlib.import_module("dags.migrations.0008_event_owner_backfill")
    owner = UserFactory()
    run = DagRun.objects.create(template_name="t", owner=owner)
    entries = [
        DagEvent.objects.create(run_id=run.id, kind="transition", actor="x") for _ in range(2)
    ]
    DagEvent.objects.update(owner=None)
    migration.backfill(apps, None)
    assert set(
        DagEvent.objects.filter(id__in=[e.id for e in entries]).values_list("owner_id", flat=True)
    ) == {owner.pk}


def test_a_runs_and_its_nodes_new_entries_carry_the_runs_owner():
    from django.db import transaction

    from dags.history import node_move, run_move

    owner = UserFactory()
    run = DagRun.objects.create(template_name="t", owner=owner)
    run.nodes.create(key="a")
    with transaction.atomic():
        run_move(run, "running", actor="x")
        node_move(run.nodes.get(key="a"), "ready", actor="x")  # read through its run
        node_move(DagNodeRun.objects.get(run=run, key="a"), "running", actor="x",
                  instance_id=uuid.uuid4(), instance_name="n")  # fmt: skip
    assert (
        list(DagEvent.objects.filter(run_id=run.id).values_list("owner_id", flat=True))
        == [owner.pk] * 3
    )
