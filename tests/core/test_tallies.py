"""Tallies: counts kept by the counted table's triggers (``core.tallies``), on PostgreSQL.

The instance tally (``containers.instances``, migration 0023) stands in for every tally:
after any write, its sums equal a grouped count of the table itself.
"""

from __future__ import annotations

import pytest
from django.db import transaction
from django.db.models import Count

from containers.models import ContainerInstance
from containers.tallies import INSTANCE_TALLY, instance_counts
from core.models import Tally
from core.tallies import tallies_fold
from tests.factories import InstanceFactory, RuntimeFactory

pytestmark = pytest.mark.django_db


def counted() -> dict[tuple[int, str], int]:
    rows = ContainerInstance.objects.order_by().values_list("runtime_id", "status")
    return {(r, s): n for r, s, n in rows.annotate(n=Count("id"))}


def test_the_tally_follows_inserts_transitions_bulk_updates_and_deletes():
    a, b = InstanceFactory(), InstanceFactory()
    InstanceFactory.create_batch(3, runtime=a.runtime)
    assert instance_counts() == counted()
    ContainerInstance.objects.filter(pk=a.pk).update(status="running")
    ContainerInstance.objects.filter(runtime=a.runtime).exclude(pk=a.pk).update(status="stopped")
    assert instance_counts() == counted()
    far = RuntimeFactory(name="far")
    ContainerInstance.objects.filter(pk=b.pk).update(runtime=far, status="failed")
    assert instance_counts() == counted()
    ContainerInstance.objects.filter(pk=a.pk).delete()
    assert instance_counts() == counted()
    assert instance_counts()[(far.pk, "failed")] == 1


def test_an_update_that_moves_no_row_between_keys_writes_no_delta():
    instance = InstanceFactory()
    before = Tally.objects.count()
    ContainerInstance.objects.filter(pk=instance.pk).update(runtime_node_name="node-1")
    assert Tally.objects.count() == before


def test_a_rolled_back_change_leaves_the_tally_as_it_was():
    instance = InstanceFactory()
    before = instance_counts()
    with pytest.raises(RuntimeError), transaction.atomic():
        ContainerInstance.objects.filter(pk=instance.pk).update(status="running")
        InstanceFactory()
        raise RuntimeError
    assert instance_counts() == before == counted()


def test_a_fold_keeps_every_count_in_one_row_per_key():
    instance = InstanceFactory()
    for status in ("creating", "running", "stopped", "running"):
        ContainerInstance.objects.filter(pk=instance.pk).update(status=status)
    before = instance_counts()
    assert Tally.objects.filter(name=INSTANCE_TALLY).count() > len(before)
    assert tallies_fold() > 0
    assert instance_counts() == before == counted()
    keys = Tally.objects.filter(name=INSTANCE_TALLY).values_list("key", flat=True)
    assert len(keys) == len(set(keys)) == len(before)


def test_a_truncate_of_the_counted_table_empties_its_tally():
    from django.db import connection

    InstanceFactory.create_batch(2)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # Django's foreign keys are deferred
        cursor.execute("TRUNCATE containers_containerinstance CASCADE")
    assert instance_counts() == {} == counted()


def grouped_usage() -> dict[int, tuple[int, int]]:
    """Placement's usage as a grouped count of the instances (what the tally replaces)."""
    from containers.requests.slots import _holds_slot
    from containers.states import PLACE_FREE

    rows = (
        ContainerInstance.objects.filter(runtime_id__isnull=False)
        .exclude(status__in=sorted(PLACE_FREE))
        .order_by()
        .values_list("runtime_id")
        .annotate(n=Count("id"), held=Count("id", filter=_holds_slot()))
    )
    return {pk: (n, held) for pk, n, held in rows}


def test_placement_usage_from_the_tally_equals_a_count_of_the_instances():
    from containers.requests.slots import engine_usage

    def usage():
        return {pk: (u.containers, u.slots) for pk, u in engine_usage().items()}

    near, far = RuntimeFactory(name="near"), RuntimeFactory(name="far")
    for runtime, statuses in (
        (near, ("running", "running", "stopped", "creating", "pending", "deleting")),
        (far, ("failed", "starting", "delete_pending")),
        (None, ("pending", "pending")),  # creates waiting unplaced
    ):
        for status in statuses:
            InstanceFactory(runtime=runtime, status=status)
    assert usage() == grouped_usage()
    assert usage()[near.pk] == (4, 1)  # running x2, stopped, creating; the creating's slot
    with transaction.atomic():  # a writer's own rows count in its own transaction
        InstanceFactory(runtime=far, status="running")
        assert usage() == grouped_usage()
        assert usage()[far.pk][0] == 3
    ContainerInstance.objects.filter(runtime=near).update(status="deleting")
    assert usage() == grouped_usage()
    assert near.pk not in usage()
