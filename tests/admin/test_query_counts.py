"""Changelists cost the same number of queries for 3 rows as for 30."""

from __future__ import annotations

import pytest
from django.urls import reverse

from containers.models import ContainerEvent, OrphanContainer, Workspace
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory, UserFactory

pytestmark = pytest.mark.django_db


def _instances(n):
    # Each row with its own template, runtime and owner: the worst case for N+1.
    InstanceFactory.create_batch(n)


def _events(n):
    for i in range(n):
        ContainerEvent.objects.create(
            instance_id=f"00000000-0000-0000-0000-{i:012d}",
            instance_name=f"i{i}",
            kind="transition",
            actor=f"actor{i % 3}",
        )


def _orphans(n):
    for i in range(n):
        OrphanContainer.objects.create(runtime=RuntimeFactory(), container_id=f"c{i}", name=f"o{i}")


def _workspaces(n):
    for i in range(Workspace.objects.count(), Workspace.objects.count() + n):
        runtime, owner = RuntimeFactory(), UserFactory()
        Workspace.objects.create(
            runtime=runtime, owner=owner, kind="volume", source=f"w{i}", uid=1, gid=1
        )


# Pinned: session, user, count, paginated rows, and one query per related-field filter
# (or the date hierarchy); never one per row.
def _runtimes(n):
    # Each runtime with an instance, one of them in a slot: load is counted in the list's
    # own statement, never per row.
    for _ in range(n):
        InstanceFactory(runtime=RuntimeFactory(), status="creating")


CASES = {
    "containers_containerinstance": (_instances, 8),
    "outbox_outboxevent": (RequestFactory.create_batch, 8),
    "containers_containerevent": (_events, 9),
    "containers_orphancontainer": (_orphans, 6),
    "containers_workspace": (_workspaces, 6),
    "containers_runtime": (_runtimes, 5),
}


@pytest.mark.parametrize("model", list(CASES))
def test_changelist_query_count_is_flat(as_user, superuser, model, django_assert_num_queries):
    make, pinned = CASES[model]
    client = as_user(superuser)
    url = reverse(f"admin:{model}_changelist")
    make(3)
    with django_assert_num_queries(pinned):
        client.get(url)
    make(27)
    with django_assert_num_queries(pinned):
        client.get(url)


def test_dashboard_query_count_is_pinned(as_user, superuser, django_assert_num_queries):
    client = as_user(superuser)
    InstanceFactory.create_batch(3)
    url = reverse("admin:containers_dashboard")
    # The slot count is two queries when any instance is creating or starting, one when none;
    # dead and processing outbox rows are one query each (each from its partial index);
    # open dead letters are two queries, three when any dead row's instance exists; the
    # engines' table is three (the runtimes, their instances by status, their slots).
    with django_assert_num_queries(15):
        client.get(url)
    InstanceFactory.create_batch(27, status="pending")
    with django_assert_num_queries(15):
        client.get(url)
