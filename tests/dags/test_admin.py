"""The DAG admin pages: templates validated when saved, a run's graph, cancel, retry."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from dags.models import DagRun, DagTemplate
from dags.services import dag_run_start, dag_template_save
from tenants.roles import OPERATORS, VIEWERS, roles_install
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NODES = [
    {"key": "a", "template": "sleeper"},
    {"key": "b", "template": "sleeper", "depends_on": ["a"]},
    {"key": "c", "template": "sleeper", "depends_on": ["a"]},
    {"key": "d", "template": "sleeper", "depends_on": ["b", "c"]},
]


def staff_in(group: str) -> Client:
    roles_install()
    user = UserFactory(username=f"{group}-1", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def run(template, owner):
    dag = dag_template_save(name="diamond", nodes=NODES)
    return dag_run_start(dag=dag, owner=owner, actor="t")


def test_an_operator_saves_a_dag_template_and_a_cycle_is_refused_on_the_form(template):
    client = staff_in(OPERATORS)
    cycle = '[{"key": "a", "template": "sleeper", "depends_on": ["a"]}]'
    response = client.post(
        "/admin/dags/dagtemplate/add/", {"name": "loop", "description": "", "nodes": cycle}
    )
    assert response.status_code == 200
    assert "node a: depends on itself" in response.content.decode()
    assert not DagTemplate.objects.exists()
    good = '[{"key": "a", "template": "sleeper"}]'
    response = client.post(
        "/admin/dags/dagtemplate/add/", {"name": "one", "description": "", "nodes": good}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert DagTemplate.objects.get(name="one").nodes[0]["template"] == template.pk


def test_the_run_page_draws_each_node_with_its_state_and_refreshes_from_its_fragment(run):
    client = staff_in(VIEWERS)
    page = client.get(f"/admin/dags/dagrun/{run.pk}/change/").content.decode()
    for key in "abcd":
        assert f'data-key="{key}" data-status="waiting"' in page
    assert page.count("<line ") == 4  # a→b, a→c, b→d, c→d
    graph_url = f"/admin/dags/dagrun/{run.pk}/graph/"
    assert graph_url in page
    assert "https://" not in page.split("<body")[0]  # no script or style from elsewhere
    assert 'id="gb-cancel"' not in page  # viewers only look
    fragment = client.get(graph_url).content.decode()
    assert fragment.count('class="gb-node"') == 4 and 'data-active="1"' in fragment


def test_cancel_and_retry_failed_from_the_admin(run):
    client = staff_in(OPERATORS)
    page = client.get(f"/admin/dags/dagrun/{run.pk}/change/").content.decode()
    assert 'id="gb-cancel"' in page
    response = client.post(
        "/admin/dags/dagrun/",
        {"action": "retry_failed_runs", "_selected_action": [str(run.pk)]},
        follow=True,
    )
    assert "not failed" in response.content.decode()
    response = client.post(
        "/admin/dags/dagrun/",
        {"action": "cancel_runs", "_selected_action": [str(run.pk)]},
        follow=True,
    )
    assert "Cancel: 1 run(s)." in response.content.decode()
    assert DagRun.objects.get(pk=run.pk).status == "cancelled"
    viewer = staff_in(VIEWERS)
    viewer.post("/admin/dags/dagrun/", {"action": "cancel_runs", "_selected_action": [str(run.pk)]})
    assert DagRun.objects.get(pk=run.pk).status == "cancelled"


def test_the_run_changelist_costs_the_same_queries_for_1_or_5_runs(run, owner):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = staff_in(OPERATORS)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/admin/dags/dagrun/").status_code == 200
        return len(queries)

    one = count()
    for _ in range(4):
        dag_run_start(dag=run.template, owner=owner, actor="t")
    assert count() == one


@pytest.mark.parametrize(
    ("status", "cancel", "retry"),
    [
        ("pending", True, False),
        ("running", True, False),
        ("cancelling", False, False),
        ("succeeded", False, False),
        ("failed", False, True),
        ("cancelled", False, False),
    ],
)
def test_the_run_page_offers_only_the_buttons_its_state_allows(run, status, cancel, retry):
    DagRun.objects.filter(pk=run.pk).update(status=status)
    page = staff_in(OPERATORS).get(f"/admin/dags/dagrun/{run.pk}/change/").content.decode()
    assert ('id="gb-cancel"' in page) is cancel
    assert ('id="gb-retry"' in page) is retry


def test_a_new_dag_templates_nodes_field_starts_as_an_example_list_not_null():
    client = staff_in(OPERATORS)
    page = client.get("/admin/dags/dagtemplate/add/").content.decode()
    field = page.split('name="nodes"', 1)[1].split("</textarea>", 1)[0]
    assert "null" not in field
    assert field.split(">", 1)[1].strip().startswith("[")
