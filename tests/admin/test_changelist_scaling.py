"""Changelists cost what their page shows: the same queries for 3 rows as for 30, no full
count and no count past ``core.admin_lists.COUNT_CAP``; their filters never list every
owner or template (``core.admin_lists``)."""

from __future__ import annotations

import itertools

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from containers.models import (
    ContainerEvent,
    ContainerInstance,
    OrphanContainer,
    RuntimeEvent,
    Workspace,
)
from core import admin_lists
from dags.models import DagEvent, DagRun
from dags.services import dag_template_save
from tenants.models import GroupQuota, UserQuota
from tests.factories import (
    InstanceFactory,
    RequestFactory,
    RuntimeFactory,
    TemplateFactory,
    UserFactory,
    api_token,
)

pytestmark = pytest.mark.django_db

_n = itertools.count()


@pytest.fixture
def root():
    """A superuser without a password (logged in by session): no hashing to wait for."""
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def _instances(n):
    # Each row with its own template, runtime and owner: the worst case for N+1.
    InstanceFactory.create_batch(n)


def _events(n):
    for _ in range(n):
        i = next(_n)
        ContainerEvent.objects.create(
            instance_id=f"00000000-0000-0000-0000-{i:012d}",
            instance_name=f"i{i}",
            kind="transition",
            actor=f"actor{i % 3}",
        )


def _runtime_events(n):
    for _ in range(n):
        i = next(_n)
        RuntimeEvent.objects.create(
            runtime_id=i, runtime_name=f"r{i}", kind="engine.cordoned", actor=f"actor{i % 3}"
        )


def _orphans(n):
    for _ in range(n):
        i = next(_n)
        OrphanContainer.objects.create(runtime=RuntimeFactory(), container_id=f"c{i}", name=f"o{i}")


def _workspaces(n):
    for _ in range(n):
        runtime, owner = RuntimeFactory(), UserFactory()
        Workspace.objects.create(
            runtime=runtime, owner=owner, kind="volume", source=f"w{next(_n)}", uid=1, gid=1
        )


def _runtimes(n):
    # Each runtime with an instance, one of them in a slot: load is counted in the list's
    # own statement, never per row.
    for _ in range(n):
        InstanceFactory(runtime=RuntimeFactory(), status="creating")


def _dag_templates(n):
    TemplateFactory(name=f"t{next(_n)}")
    for _ in range(n):
        dag_template_save(
            name=f"d{next(_n)}", nodes=[{"key": "a", "template": TemplateFactory().name}]
        )


def _dag_runs(n):
    for _ in range(n):
        DagRun.objects.create(template_name=f"d{next(_n)}", owner=UserFactory())


def _dag_events(n):
    run = DagRun.objects.create(template_name="d", owner=UserFactory())
    DagEvent.objects.bulk_create(DagEvent(run_id=run.pk, kind="transition") for _ in range(n))


def _user_quotas(n):
    for _ in range(n):
        UserQuota.objects.create(user=UserFactory())


def _group_quotas(n):
    for _ in range(n):
        GroupQuota.objects.create(group=Group.objects.create(name=f"g{next(_n)}"))


def _tokens(n):
    for _ in range(n):
        api_token(UserFactory())


# Pinned: session, user, the counts, the page, and one query per filter that lists
# related rows (runtimes, groups) or per prefetch; never one per row. The counts: the
# growing tables' (core.admin_lists.FlatChangelistMixin) are the planner's estimate and,
# the table being small here, a count capped at COUNT_CAP (on a big table, the estimate
# alone); the small tables' are Django's two (the page's, the table's).
# Every changelist of gobrave's own apps is here (test_every_changelist_is_pinned).
def _webhook_endpoints(n: int) -> None:
    from webhooks.models import WebhookEndpoint

    start = WebhookEndpoint.objects.count()
    for i in range(start, start + n):  # rows as stored: no URL is resolved here
        WebhookEndpoint.objects.create(
            url=f"https://hooks{i}.example/h", event_kinds=["request.dead"]
        )


CASES = {
    "containers_containerinstance": (_instances, 6),  # + the runtimes filter
    "containers_containerevent": (_events, 5),
    "containers_runtimeevent": (_runtime_events, 5),
    "containers_orphancontainer": (_orphans, 6),  # + the runtimes filter
    "containers_workspace": (_workspaces, 6),  # + the runtimes filter
    "containers_runtime": (_runtimes, 5),
    "containers_containertemplate": (TemplateFactory.create_batch, 6),  # + groups, filter
    "outbox_outboxevent": (RequestFactory.create_batch, 5),
    "dags_dagtemplate": (_dag_templates, 5),
    "dags_dagrun": (_dag_runs, 6),  # + the runs' nodes
    "dags_dagevent": (_dag_events, 5),
    "tenants_userquota": (_user_quotas, 5),
    "tenants_groupquota": (_group_quotas, 5),
    "tenants_apitoken": (_tokens, 5),
    "webhooks_webhookendpoint": (_webhook_endpoints, 5),
}


def _get(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.status_code
    return [q["sql"] for q in captured.captured_queries]


def test_every_changelist_is_pinned():
    ours = {"containers", "dags", "outbox", "tenants", "core", "webhooks", "events"}
    registered = {
        f"{model._meta.app_label}_{model._meta.model_name}"
        for model in admin.site._registry
        if model._meta.app_label in ours
    }
    assert registered == set(CASES)


@pytest.mark.parametrize("model", list(CASES))
def test_changelist_query_count_is_flat(as_user, root, model):
    make, pinned = CASES[model]
    client = as_user(root)
    url = reverse(f"admin:{model}_changelist")
    make(3)
    three = _get(client, url)
    make(27)
    thirty = _get(client, url)
    for name, sql in (("3 rows", three), ("30 rows", thirty)):
        shown = "\n".join(sql)
        assert len(sql) == pinned, (
            f"{model} with {name}: {len(sql)} queries, pinned {pinned}:\n{shown}"
        )
        assert "SELECT DISTINCT" not in shown.upper(), shown


def test_the_owner_filter_is_a_text_box_not_a_list_of_users(as_user, root):
    owners = UserFactory.create_batch(30)
    theirs = InstanceFactory(owner=owners[0])
    client = as_user(root)
    url = reverse("admin:containers_containerinstance_changelist")
    page = client.get(url, {"owner": owners[0].username}).content.decode()
    assert 'name="owner"' in page
    assert f'value="{owners[0].username}"' in page
    assert str(theirs.pk)[:8] in page
    shown = [user.username for user in owners[1:] if f">{user.username}<" in page]
    assert shown == [], "the sidebar lists users"
    # by id too, and with another filter kept beside it
    page = client.get(url, {"owner": str(owners[0].pk), "status__exact": "pending"})
    assert list(page.context["cl"].result_list) == [theirs]


def test_the_template_filter_is_a_text_box_and_finds_by_name(as_user, root):
    mine = InstanceFactory()
    TemplateFactory.create_batch(5)
    client = as_user(root)
    url = reverse("admin:containers_containerinstance_changelist")
    response = client.get(url, {"template": mine.template.name})
    assert list(response.context["cl"].result_list) == [mine]
    assert client.get(url, {"template": "no-such-template"}).context["cl"].result_list.count() == 0


def test_a_count_past_the_cap_stops_there_and_unfiltered_is_the_planners_estimate(
    as_user, root, monkeypatch
):
    monkeypatch.setattr(admin_lists, "COUNT_CAP", 5)
    InstanceFactory.create_batch(8)
    client = as_user(root)
    url = reverse("admin:containers_containerinstance_changelist")
    filtered = _get(client, f"{url}?status__exact=pending")
    response = client.get(url, {"status__exact": "pending"})
    assert str(response.context["cl"].result_count) == "5+"
    assert "5+" in response.content.decode()
    assert any("LIMIT 6" in sql for sql in filtered), filtered  # the count stops at the cap
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ContainerInstance._meta.db_table}")
    response = client.get(url)
    assert str(response.context["cl"].result_count) == "about 8"
    assert response.context["cl"].paginator.num_pages == 1


def test_the_history_filters_are_the_codes_kinds_and_a_typed_actor(as_user, root):
    _events(3)
    ContainerEvent.objects.create(
        instance_id="00000000-0000-0000-0000-00000000abcd", kind="renamed", actor="someone"
    )
    client = as_user(root)
    url = reverse("admin:containers_containerevent_changelist")
    page = client.get(url).content.decode()
    assert "actor0" not in page.split('id="changelist-filter"')[1]  # the sidebar: a box
    response = client.get(url, {"actor": "someone"})
    assert [e.kind for e in response.context["cl"].result_list] == ["renamed"]
    response = client.get(url, {"kind": "renamed"})
    assert [e.actor for e in response.context["cl"].result_list] == ["someone"]


def test_dashboard_query_count_is_pinned(as_user, root, django_assert_num_queries):
    client = as_user(root)
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


@pytest.mark.parametrize(
    "model, query",
    [
        ("containers_containerinstance", {"owner": "a\x00b"}),
        ("containers_containerinstance", {"template": "a\x00b"}),
        ("containers_containerevent", {"actor": "a\x00b"}),
        ("containers_containerevent", {"kind": "a\x00b"}),
        ("outbox_outboxevent", {"queue": "a\x00b"}),
    ],
)
def test_a_filter_value_the_database_cannot_compare_is_the_invalid_filter_page(
    as_user, root, model, query
):
    response = as_user(root).get(reverse(f"admin:{model}_changelist"), query)
    assert response.status_code == 302 and response.url.endswith("?e=1"), response
