"""The DAG API: templates written by operators, runs owner-scoped (contract §7 and §8)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from dags.models import DagEvent, DagRun, DagTemplate
from dags.services import dag_run_start, dag_template_save
from tests.api.helpers import assert_error
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db

DIAMOND = [
    {"key": "a", "template": "sleeper"},
    {"key": "b", "template": "sleeper", "depends_on": ["a"]},
    {"key": "c", "template": "sleeper", "depends_on": ["a"]},
    {"key": "d", "template": "sleeper", "depends_on": ["b", "c"], "retries": 2},
]


@pytest.fixture
def dag(template):
    return dag_template_save(name="diamond", nodes=DIAMOND)


def test_an_operator_creates_a_dag_template_and_a_user_may_not(staff, alice, template):
    body = {"name": "diamond", "nodes": DIAMOND}
    assert_error(alice.post("/api/dag-templates/", body, format="json"), 403)
    response = staff.post("/api/dag-templates/", body, format="json")
    assert response.status_code == 201, response.content
    saved = DagTemplate.objects.get(name="diamond")
    assert [n["template"] for n in saved.nodes] == [template.pk] * 4
    assert response.json()["nodes"][3]["retries"] == 2


def test_a_cycle_or_unknown_dependency_is_refused_with_400_and_saves_nothing(staff, template):
    cycle = [
        {"key": "a", "template": "sleeper", "depends_on": ["b"]},
        {"key": "b", "template": "sleeper", "depends_on": ["a"]},
    ]
    error = assert_error(
        staff.post("/api/dag-templates/", {"name": "x", "nodes": cycle}, format="json"),
        400,
        "invalid_dag",
    )
    assert error["message"] in ("cycle: a -> b -> a", "cycle: b -> a -> b")
    unknown = [{"key": "a", "template": "sleeper", "depends_on": ["nope"]}]
    error = assert_error(
        staff.post("/api/dag-templates/", {"name": "x", "nodes": unknown}, format="json"),
        400,
        "invalid_dag",
    )
    assert "unknown node 'nope'" in error["message"]
    assert not DagTemplate.objects.exists()


def test_a_user_starts_a_run_and_sees_its_nodes(alice, dag):
    response = alice.post("/api/dag-runs/", {"template": "diamond"}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "pending" and body["owner"] == "alice"
    assert [(n["key"], n["status"]) for n in body["nodes"]] == [
        ("a", "waiting"),
        ("b", "waiting"),
        ("c", "waiting"),
        ("d", "waiting"),
    ]
    assert response["Location"].endswith(f"/api/dag-runs/{body['id']}/")
    listed = alice.get("/api/dag-runs/").json()["results"]
    assert [r["id"] for r in listed] == [body["id"]]
    assert listed[0]["node_counts"] == {"waiting": 4}
    detail = alice.get(f"/api/dag-runs/{body['id']}/").json()
    assert detail["id"] == body["id"] and len(detail["nodes"]) == 4


def test_another_users_run_answers_404_and_an_operator_sees_it(alice, mallory, staff, dag):
    run = alice.post("/api/dag-runs/", {"template": "diamond"}, format="json").json()
    assert_error(mallory.get(f"/api/dag-runs/{run['id']}/"), 404, "not_found")
    assert_error(mallory.post(f"/api/dag-runs/{run['id']}/cancel/"), 404, "not_found")
    assert mallory.get("/api/dag-runs/").json()["results"] == []
    assert staff.get(f"/api/dag-runs/{run['id']}/").status_code == 200
    assert DagRun.objects.get(pk=run["id"]).status == "pending"


def test_cancel_a_pending_run_then_retry_failed_is_refused_with_409(alice, dag):
    run = alice.post("/api/dag-runs/", {"template": "diamond"}, format="json").json()
    response = alice.post(f"/api/dag-runs/{run['id']}/cancel/")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "cancelled"
    assert {n["status"] for n in body["nodes"]} == {"cancelled"}
    assert alice.post(f"/api/dag-runs/{run['id']}/cancel/").status_code == 202  # a no-op
    error = assert_error(
        alice.post(f"/api/dag-runs/{run['id']}/retry-failed/"), 409, "invalid_transition"
    )
    assert "not failed" in error["message"]


def test_a_dag_using_a_template_the_user_may_not_use_answers_as_not_found(
    alice, staff, owner, template
):
    limited = TemplateFactory(name="limited")
    limited.allowed_groups.add(Group.objects.create(name="lab"))
    dag = dag_template_save(
        name="guarded",
        nodes=[{"key": "a", "template": "sleeper"}, {"key": "b", "template": "limited"}],
    )
    assert alice.get("/api/dag-templates/").json()["results"] == []
    assert_error(alice.get(f"/api/dag-templates/{dag.pk}/"), 404, "not_found")
    error = assert_error(alice.post("/api/dag-runs/", {"template": "guarded"}, format="json"), 400)
    assert error["details"] == {"template": ["no DAG template 'guarded' that you may run"]}
    assert staff.get(f"/api/dag-templates/{dag.pk}/").status_code == 200  # operators see it
    with pytest.raises(Exception, match="no DAG template 'guarded'"):
        dag_run_start(dag=dag, owner=owner, actor="t")
    assert not DagRun.objects.exists()
    owner.groups.add(Group.objects.get(name="lab"))
    assert [d["name"] for d in alice.get("/api/dag-templates/").json()["results"]] == ["guarded"]


def test_the_run_list_costs_the_same_queries_for_1_or_5_runs(alice, owner, dag):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert alice.get("/api/dag-runs/").status_code == 200
        return len(queries)

    dag_run_start(dag=dag, owner=owner, actor="t")
    one = count()
    for _ in range(4):
        dag_run_start(dag=dag, owner=owner, actor="t")
    assert count() == one


def test_run_reasons_and_history_hide_host_paths_from_users_not_from_operators(alice, staff, dag):
    """contract §8: a refused create's reason may name a host path; users never see it."""
    body = alice.post("/api/dag-runs/", {"template": "diamond"}, format="json").json()
    run = DagRun.objects.get(pk=body["id"])
    leak = "mount /var/lib/docker/volumes/secret-data refused"
    DagRun.objects.filter(pk=run.pk).update(reason=leak)
    run.nodes.filter(key="a").update(reason=leak)
    DagEvent.objects.filter(run_id=run.pk).update(message=leak)
    mine = alice.get(f"/api/dag-runs/{run.pk}/").json()
    node_a = next(n for n in mine["nodes"] if n["key"] == "a")
    events = alice.get(f"/api/dag-runs/{run.pk}/events/").json()["results"]
    listed = alice.get("/api/dag-runs/").json()["results"][0]
    assert events, "the run has a history"
    shown = [mine["reason"], node_a["reason"], listed["reason"], *(e["message"] for e in events)]
    assert all("/var/lib/docker" not in text and "<host path>" in text for text in shown), shown
    theirs = staff.get(f"/api/dag-runs/{run.pk}/").json()
    assert theirs["reason"] == leak, theirs["reason"]


def test_a_run_is_named_by_a_prefix_of_eight_hex_digits_dashed_or_not_as_instances_are(
    alice, owner, dag
):
    run = dag_run_start(dag=dag, owner=owner, actor="test")
    digits = run.id.hex
    for ref in (digits[:8], digits[:12].upper(), str(run.id)[:13]):
        response = alice.get(f"/api/dag-runs/{ref}/")
        assert response.status_code == 200, (ref, response.content)
    assert_error(alice.get(f"/api/dag-runs/{digits[:7]}/"), 404, "not_found")


def test_a_run_s_history_gives_each_kind_in_words(alice, owner, dag):
    from dags.history import DAG_EVENT_KIND_WORDS, dag_event_kind_display

    run = dag_run_start(dag=dag, owner=owner, actor="test")
    rows = alice.get(f"/api/dag-runs/{run.pk}/events/").json()["results"]
    shown = {(row["kind"], row["kind_display"]) for row in rows}
    assert ("DagRunStart", "run requested") in shown, shown
    for kind, words in DAG_EVENT_KIND_WORDS.items():
        assert words == words.lower() and "_" not in words, (kind, words)
    assert dag_event_kind_display("SomethingNew") == "something new"
