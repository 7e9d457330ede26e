"""Query counts of the list endpoints stay flat however many rows a page shows."""

from __future__ import annotations

import pytest
from django.utils import timezone

from containers.requests.lifecycle import record
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RuntimeFactory, TemplateFactory, UserFactory

pytestmark = pytest.mark.django_db

# token lookup (with its user) + the caller's permissions (own and groups', one query,
# tenants.backends) + COUNT + page
LIST_QUERIES = 4


def _instances(n, owner):
    # Each instance gets its own template and runtime, so a missing join would show.
    for i in range(n):
        InstanceFactory(
            owner=owner,
            template=TemplateFactory(),
            runtime=RuntimeFactory(),
            name=f"i{i}",
        )


@pytest.mark.parametrize("rows", [3, 30])
def test_container_list_query_count_is_flat(alice, owner, rows, django_assert_num_queries):
    _instances(rows, owner)
    with django_assert_num_queries(LIST_QUERIES):
        response = alice.get("/api/containers/")
    assert response.json()["count"] == rows


@pytest.mark.parametrize("rows", [3, 30])
def test_staff_container_list_query_count_is_flat(staff, rows, django_assert_num_queries):
    for i in range(rows):
        _instances(1, UserFactory(username=f"u{i}"))
    with django_assert_num_queries(LIST_QUERIES):
        response = staff.get("/api/containers/?ordering=name")
    assert len(response.json()["results"]) == rows


@pytest.mark.parametrize("rows", [3, 30])
def test_events_query_count_is_flat(alice, make_instance, rows, django_assert_num_queries):
    instance = make_instance()
    for _ in range(rows):
        record(instance, kind="note", actor="test")
    # token + permissions + the instance + COUNT + the page
    with django_assert_num_queries(5):
        assert alice.get(f"/api/containers/{instance.pk}/events/").json()["count"] == rows


@pytest.mark.parametrize("rows", [3, 30])
def test_template_list_query_count_is_flat(alice, rows, django_assert_num_queries):
    for _ in range(rows):
        TemplateFactory()
    # ... + the templates' allowed groups, in one query
    with django_assert_num_queries(LIST_QUERIES + 1):
        assert alice.get("/api/templates/").json()["count"] == rows


@pytest.mark.parametrize("rows", [3, 30])
def test_outbox_list_query_count_is_flat(staff, rows, django_assert_num_queries):
    for i in range(rows):
        OutboxEvent.objects.create(
            kind="ContainerCreateRequest", queue="create", aggregate_id=str(i),
            available_at=timezone.now(),
        )  # fmt: skip
    with django_assert_num_queries(LIST_QUERIES):
        assert staff.get("/api/outbox/").json()["count"] == rows


@pytest.mark.parametrize("rows", [3, 30])
def test_runtime_list_query_count_is_flat(staff, rows, django_assert_num_queries):
    for _ in range(rows):
        RuntimeFactory()
    with django_assert_num_queries(LIST_QUERIES):
        assert staff.get("/api/runtimes/").json()["count"] >= rows
