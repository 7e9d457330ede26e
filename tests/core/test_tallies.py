"""Tallies: counts kept by the counted table's triggers (``core.tallies``), on PostgreSQL.

The instance tally (``containers.instances``, migration 0023) stands in for every tally:
after any write, its sums equal a grouped count of the table itself.
"""

from __future__ import annotations

import pytest
from django.db import transaction
from django.db.models import Count

from containers.models import ContainerInstance
from containers.selectors import INSTANCE_TALLY, instance_counts
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
