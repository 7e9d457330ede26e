"""Every API list costs what its page shows: the same queries for 3 rows as for 30, no
``COUNT`` and no ``OFFSET``; and its cursor pages are stable while rows are inserted
(``core.api.pagination``)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from containers.models import ContainerInstance
from containers.requests.lifecycle import record
from dags.models import DagEvent
from dags.services import dag_run_start, dag_template_save
from tests.api.helpers import assert_error
from tests.factories import (
    InstanceFactory,
    RequestFactory,
    RuntimeFactory,
    TemplateFactory,
    api_token,
)

pytestmark = pytest.mark.django_db

# Every request: the token (with its user) and the caller's permissions (tenants.backends).
AUTH = 2


def _queries(client, url: str) -> tuple[list[str], dict]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return [q["sql"] for q in captured.captured_queries], response.json()


def assert_flat(client, url: str, make, pinned: int) -> None:
    """``url`` costs ``pinned`` queries with 3 rows, with 30, and on a cursor's page."""
    make(3)
    three, body = _queries(client, url)
    assert len(body["results"]) >= 3
    make(27)
    thirty, body = _queries(client, url)
    assert len(body["results"]) >= 30
    page = client.get(f"{url}{'&' if '?' in url else '?'}limit=10").json()
    later, body = _queries(client, page["next"])
    assert len(body["results"]) == 10 and body["previous"]
    for name, sql in (("3 rows", three), ("30 rows", thirty), ("a cursor's page", later)):
        shown = "\n".join(sql)
        assert len(sql) == pinned, (
            f"{url} with {name}: {len(sql)} queries, pinned {pinned}:\n{shown}"
        )
        assert "COUNT(" not in shown.upper() and " OFFSET " not in shown.upper(), shown


def test_the_instance_list_of_an_owner_is_flat(alice, owner):
    # Each instance with its own template and runtime, so a missing join would show.
    def make(n):
        for _ in range(n):
            InstanceFactory(owner=owner, template=TemplateFactory(), runtime=RuntimeFactory())

    assert_flat(alice, "/api/containers/", make, AUTH + 1)


def test_the_instance_list_of_an_operator_is_flat(staff):
    assert_flat(staff, "/api/containers/?ordering=name", InstanceFactory.create_batch, AUTH + 1)


def test_a_filtered_instance_list_is_flat(staff, owner):
    def make(n):
        InstanceFactory.create_batch(n, owner=owner, status="running")

    url = f"/api/containers/?owner={owner.username}&status=running&ordering=-status_changed_at"
    # ... + the owner's id by their name (core.api.filters.NameOrIdFilter), the page
    assert_flat(staff, url, make, AUTH + 2)


def test_an_instances_history_is_flat(alice, make_instance):
    instance = make_instance()

    def make(n):
        for _ in range(n):
            record(instance, kind="note", actor="test")

    # ... + the instance
    assert_flat(alice, f"/api/containers/{instance.pk}/events/", make, AUTH + 2)


def test_the_template_list_is_flat(alice):
    # ... + the templates' allowed groups, in one query
    assert_flat(alice, "/api/templates/", TemplateFactory.create_batch, AUTH + 2)


def test_the_runtime_list_is_flat(staff):
    assert_flat(staff, "/api/runtimes/", RuntimeFactory.create_batch, AUTH + 1)


def test_the_outbox_list_is_flat(staff):
    assert_flat(staff, "/api/outbox/", RequestFactory.create_batch, AUTH + 1)


def test_the_token_list_is_flat(alice, owner):
    def make(n):
        for _ in range(n):
            api_token(owner)

    # the token (with its user), the page: listing one's tokens asks no permission
    assert_flat(alice, "/api/tokens/", make, AUTH)


def test_the_webhook_endpoint_list_is_flat(staff):
    from webhooks.models import WebhookEndpoint

    made = iter(range(100))

    def make(n):
        for _ in range(n):  # rows as stored: no URL is resolved in this test
            WebhookEndpoint.objects.create(
                url=f"https://hooks{next(made)}.example/h", event_kinds=["request.dead"]
            )

    # the token (with its user), the page (operators see every endpoint: no permission asked)
    assert_flat(staff, "/api/webhooks/", make, AUTH + 1)


def test_the_dag_template_list_is_flat(alice, template):
    made = iter(range(100))

    def make(n):
        for _ in range(n):
            dag_template_save(name=f"d{next(made)}", nodes=[{"key": "a", "template": "sleeper"}])

    # ... + the container templates the caller may use, the DAG templates (a catalogue
    # that operators write, read whole to keep those whose every template is usable:
    # dags.selectors.dag_template_list), the page, their secret env names
    assert_flat(alice, "/api/dag-templates/", make, AUTH + 4)


def test_the_dag_run_list_is_flat(alice, owner, template):
    dag = dag_template_save(name="pair", nodes=[{"key": "a", "template": "sleeper"}])

    def make(n):
        for _ in range(n):
            dag_run_start(dag=dag, owner=owner, actor="t")

    # ... + the runs' nodes, in one query
    assert_flat(alice, "/api/dag-runs/", make, AUTH + 2)


def test_a_dag_runs_history_is_flat(alice, owner, template):
    dag = dag_template_save(name="one", nodes=[{"key": "a", "template": "sleeper"}])
    run = dag_run_start(dag=dag, owner=owner, actor="t")

    def make(n):
        DagEvent.objects.bulk_create(DagEvent(run_id=run.pk, kind="note") for _ in range(n))

    # ... + the run
    assert_flat(alice, f"/api/dag-runs/{run.pk}/events/", make, AUTH + 2)


# --- the cursor's contract ------------------------------------------------------------------


def _walk(client, url: str, between=lambda: None) -> list[str]:
    """The ids along ``next`` from ``url``, calling ``between`` before each later page."""
    body = client.get(url).json()
    seen = [row["id"] for row in body["results"]]
    while body["next"]:
        between()
        response = client.get(body["next"])
        assert response.status_code == 200, response.content
        body = response.json()
        seen += [row["id"] for row in body["results"]]
    return seen


@pytest.mark.parametrize("ordering", ["", "-name", "status"])
def test_a_walk_along_next_sees_every_row_once_while_rows_are_inserted(staff, owner, ordering):
    """Rows inserted between pages, newest, oldest and in the middle of the order (by
    time and by name), never make the walk miss or repeat a row that was there."""
    start = timezone.now() - dt.timedelta(days=10)
    there = []
    for i in range(12):
        instance = InstanceFactory(owner=owner, name=f"m{i:02d}", status="running")
        ContainerInstance.objects.filter(pk=instance.pk).update(
            created_at=start + dt.timedelta(days=i % 7, seconds=i)
        )
        there.append(str(instance.pk))
    made = iter(range(1000))

    def insert():
        for when, name in (
            (timezone.now(), "a"),
            (start, "z"),
            (start + dt.timedelta(days=3), "m"),
        ):
            n = next(made)
            instance = InstanceFactory(owner=owner, name=f"{name}{n:02d}x", status="running")
            ContainerInstance.objects.filter(pk=instance.pk).update(created_at=when)

    seen = _walk(staff, f"/api/containers/?limit=5&ordering={ordering}", insert)
    assert len(seen) == len(set(seen)), "a row was shown twice"
    assert set(there) <= set(seen), f"missed {set(there) - set(seen)}"


def test_previous_gives_back_the_pages_that_next_gave(alice, make_instance):
    for i in range(7):
        make_instance(name=f"p{i}")
    pages = [alice.get("/api/containers/?limit=3").json()]
    while pages[-1]["next"]:
        pages.append(alice.get(pages[-1]["next"]).json())
    assert [len(p["results"]) for p in pages] == [3, 3, 1]
    assert pages[0]["previous"] is None
    for earlier, later in zip(pages, pages[1:], strict=False):
        back = alice.get(later["previous"]).json()
        assert back["results"] == earlier["results"]
        assert (back["previous"] is None) == (earlier is pages[0])


def test_a_cursor_is_refused_with_another_ordering_or_when_altered(alice, make_instance):
    for i in range(3):
        make_instance(name=f"c{i}")
    link = alice.get("/api/containers/?limit=1&ordering=name").json()["next"]
    cursor = link.split("cursor=")[1].split("&")[0]
    before = ContainerInstance.objects.count()
    for query in (f"cursor={cursor}", f"cursor={cursor}&ordering=-name", f"cursor={cursor[:-3]}"):
        error = assert_error(alice.get(f"/api/containers/?{query}"), 400, "invalid")
        assert "cursor" in error["details"], query
    assert ContainerInstance.objects.count() == before


def _forged(terms: list[str], values: list) -> str:
    import base64
    import json

    body = json.dumps({"o": terms, "v": values, "b": 0, "i": 0}).encode()
    return base64.urlsafe_b64encode(body).decode().rstrip("=")


@pytest.mark.parametrize(
    "path, terms, values",
    [
        ("/api/outbox/", ["-id"], ["99999999999999999999999"]),
        ("/api/outbox/", ["-id"], ["-1e3"]),
        ("/api/containers/?ordering=name", ["name", "id"], ["a\x00b", str(uuid.uuid4())]),
        ("/api/containers/?ordering=name", ["name", "id"], ["\ud800", str(uuid.uuid4())]),
        ("/api/containers/", ["-created_at", "-id"], ["0001-01-01T00:00:00+01:00", "x"]),
        ("/api/containers/", ["-created_at", "-id"], ["9999-12-31T23:59:59-15:00", None]),
        ("/api/containers/?ordering=status", ["status", "id"], ["x" * 300, str(uuid.uuid4())]),
    ],
)
def test_a_forged_cursor_is_a_400_never_a_500(staff, path, terms, values):
    cursor = _forged(terms, values)
    joiner = "&" if "?" in path else "?"
    error = assert_error(staff.get(f"{path}{joiner}cursor={cursor}"), 400, "invalid")
    assert "cursor" in error["details"]


def test_the_schema_documents_the_cursor_and_the_links_not_a_count():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(public=True)
    lists = [
        path
        for path, item in schema["paths"].items()
        if any(p["name"] == "cursor" for p in item.get("get", {}).get("parameters", []))
    ]
    assert len(lists) == 11, lists  # ... the events feed (events.api), webhooks
    page = schema["components"]["schemas"]["PaginatedInstanceOutputList"]
    assert set(page["properties"]) == {"next", "previous", "results"}
    for path in lists:
        names = {p["name"] for p in schema["paths"][path]["get"]["parameters"]}
        assert "offset" not in names and "limit" in names, path
