"""History entries carry their owner: new ones from their instance or run, and those
written before the column existed from migrations containers 0027 and dags 0008, in
batches (``core.batches.update_in_batches``); containers 0033
(``0033_event_owner_of_deleted_instances``) corrects the entries of deleted instances that
0027 gave to their creator before it was fixed."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.apps import apps
from django.utils import timezone

from containers.models import ContainerEvent
from dags.history import instance_id_for
from dags.models import DagEvent, DagNodeRun, DagRun
from outbox.models import OutboxEvent
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


def _requested(instance_id, owner, kind="ContainerCreateRequest") -> OutboxEvent:
    """A sent request row of the instance, as the services write them (the owner's id is
    its fairness key)."""
    return OutboxEvent.objects.create(
        kind=kind,
        queue="create",
        aggregate_id=str(instance_id),
        fairness_key=str(owner.pk),
        status="sent",
        available_at=timezone.now(),
    )


def _dag_node_instance(run: DagRun, key: str, attempt: int) -> tuple[uuid.UUID, str]:
    """A node instance's id and name as the DAG runner makes them."""
    return instance_id_for(run.id, key, attempt), f"{str(run.id)[:8]}-{key}-{attempt}"


def test_deleted_instances_entries_get_their_owner_where_it_is_known_not_their_creator():
    migration = importlib.import_module("containers.migrations.0027_event_owner_backfill")
    UserFactory(username="bf-op", is_staff=True)
    bob, carol = UserFactory(username="bf-bob"), UserFactory(username="bf-carol")
    for_bob = uuid.uuid4()  # an operator created it for bob; its requests say bob
    _requested(for_bob, bob)
    _requested(for_bob, bob, kind="ContainerDeleteRequest")
    run = DagRun.objects.create(template_name="t", owner=carol)
    node_id, node_name = _dag_node_instance(run, "build-step", 2)
    unknown = uuid.uuid4()  # an operator created it; nothing says for whom
    entries = {
        "for_bob": _entry(for_bob, kind="ContainerCreateRequest", actor="user:bf-op"),
        "node": ContainerEvent.objects.create(
            instance_id=node_id, instance_name=node_name, kind="ContainerDeleted", actor="w"
        ),
        "unknown": _entry(unknown, kind="ContainerCreateRequest", actor="user:bf-op"),
    }
    ContainerEvent.objects.update(owner=None)
    migration.backfill(apps, None)
    owners = {
        name: ContainerEvent.objects.get(pk=entry.pk).owner_id for name, entry in entries.items()
    }
    assert owners == {"for_bob": bob.pk, "node": carol.pk, "unknown": None}, owners


def test_the_follow_up_corrects_entries_given_to_the_creator_where_the_owner_is_known():
    migration = importlib.import_module(
        "containers.migrations.0033_event_owner_of_deleted_instances"
    )
    op = UserFactory(username="fu-op", is_staff=True)
    bob, carol = UserFactory(username="fu-bob"), UserFactory(username="fu-carol")
    for_bob, unknown = uuid.uuid4(), uuid.uuid4()
    _requested(for_bob, bob)
    run = DagRun.objects.create(template_name="t", owner=carol)
    node_id, node_name = _dag_node_instance(run, "a", 1)
    live = InstanceFactory(owner=carol)
    _requested(live.id, bob)  # never read: a live instance's entries are its owner's
    old = {
        "for_bob": [_entry(for_bob, actor="user:fu-op") for _ in range(3)],
        "node": [
            ContainerEvent.objects.create(
                instance_id=node_id, instance_name=node_name, kind="t", actor="dag-runner"
            )
        ],
        "unknown": [_entry(unknown, actor="user:fu-op")],
        "live": [_entry(live.id)],
    }
    ContainerEvent.objects.update(owner=op, txid=0)  # as the old 0027 left them
    ContainerEvent.objects.filter(instance_id=live.id).update(owner=carol)
    newer = _entry(for_bob)  # written since 0026 (a txid): never rewritten
    ContainerEvent.objects.filter(pk=newer.pk).update(owner=op)
    migration.correct(apps, None)
    migration.correct(apps, None)  # idempotent
    owners = {
        name: {ContainerEvent.objects.get(pk=e.pk).owner_id for e in rows}
        for name, rows in old.items()
    }
    expected = {"for_bob": {bob.pk}, "node": {carol.pk}, "unknown": {op.pk}, "live": {carol.pk}}
    assert owners == expected, owners
    assert ContainerEvent.objects.get(pk=newer.pk).owner_id == op.pk


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
