"""Every API list filters and orders through django-filter with the same parameter
names (``core.api.filters``): status, owner, template, runtime, created_after/before and
ordering where its rows have them; a bad value is a 400 naming the parameter; the
schema documents each list's parameters."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from containers.models import ContainerInstance
from tests.api.helpers import assert_error
from tests.factories import RuntimeFactory

pytestmark = pytest.mark.django_db

# list path -> the shared parameters it takes (besides created_after/before, ordering)
LISTS = {
    "/api/containers/": {"status", "owner", "template", "runtime"},
    "/api/templates/": set(),
    "/api/runtimes/": set(),
    "/api/dag-runs/": {"status", "owner", "template", "runtime"},
    "/api/dag-templates/": set(),
    "/api/outbox/": {"status"},
}
SHARED = {"status", "owner", "template", "runtime", "created_after", "created_before", "ordering"}


def _ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_the_schema_documents_the_same_parameter_names_on_every_list(staff):
    schema = staff.get("/api/schema/?format=json").json()
    for path, own in LISTS.items():
        parameters = {p["name"] for p in schema["paths"][path]["get"].get("parameters", [])}
        expected = own | {"created_after", "created_before", "ordering"}
        assert parameters & SHARED == expected, (path, sorted(parameters))


def test_created_after_and_before_bound_the_list(alice, make_instance):
    old, new = make_instance(name="old"), make_instance(name="new")
    then = timezone.now() - dt.timedelta(days=2)
    ContainerInstance.objects.filter(pk=old.pk).update(created_at=then)
    cut = (then + dt.timedelta(days=1)).isoformat()
    assert _ids(alice.get("/api/containers/", {"created_after": cut})) == [str(new.pk)]
    assert _ids(alice.get("/api/containers/", {"created_before": cut})) == [str(old.pk)]


def test_the_runtime_filter_takes_an_id_or_a_name(alice, make_instance):
    elsewhere = RuntimeFactory(name="elsewhere")
    make_instance()
    there = make_instance()
    ContainerInstance.objects.filter(pk=there.pk).update(runtime=elsewhere)
    for ref in ("elsewhere", str(elsewhere.pk)):
        assert _ids(alice.get("/api/containers/", {"runtime": ref})) == [str(there.pk)], ref


def test_an_ordering_breaks_ties_on_the_id_so_pages_never_overlap(alice, make_instance):
    made = [make_instance("running") for _ in range(5)]
    page = alice.get("/api/containers/", {"ordering": "status", "limit": 2})
    seen = _ids(page)
    while page.json()["next"]:
        page = alice.get(page.json()["next"])
        seen += _ids(page)
    assert sorted(seen) == sorted(str(i.pk) for i in made), seen


@pytest.mark.parametrize("path", sorted(LISTS))
@pytest.mark.parametrize(
    "query, field",
    [
        ({"ordering": "owner__password"}, "ordering"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2026-13-40"}, "created_before"),
        ({"created_after": "0001-01-01T00:30:00+01:00"}, "created_after"),
    ],
)
def test_a_bad_value_is_a_400_naming_the_parameter_on_every_list(staff, path, query, field):
    error = assert_error(staff.get(path, query), 400, "invalid")
    assert field in error["details"], error


@pytest.mark.parametrize("path", [p for p, own in LISTS.items() if "status" in own])
def test_an_unknown_status_is_a_400_on_every_list_that_filters_by_status(staff, path):
    error = assert_error(staff.get(path, {"status": "bogus"}), 400, "invalid")
    assert "status" in error["details"], error


@pytest.mark.parametrize("path", sorted(LISTS))
def test_every_list_orders_by_creation_both_ways(staff, path):
    forward = staff.get(path, {"ordering": "created_at"})
    backward = staff.get(path, {"ordering": "-created_at"})
    assert forward.status_code == backward.status_code == 200, (forward.content, backward.content)


@pytest.mark.parametrize("moment", ["4907-03-22T11:03:26+21:05", "0697-03-07T08:39:59.5-19:44"])
def test_an_offset_postgresql_would_refuse_is_read_as_the_same_moment_in_utc(alice, moment):
    response = alice.get("/api/containers/", {"created_after": moment})
    assert response.status_code == 200, response.content
