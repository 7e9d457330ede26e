"""``command`` is a list of words everywhere: the template API takes and answers a list
and refuses a string (400 naming the field), as DAG nodes do; the schema says
``array of string``; migrations 0014 (containers) and 0004 (dags) turned stored strings
into ``["sh", "-c", <string>]``, which runs what the string ran."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from containers.models import ContainerTemplate
from dags.models import DagRun, DagTemplate
from tests.api.helpers import assert_error
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db

TEMPLATE = {"name": "web", "image": "busybox:latest", "pull_policy": "never"}


def test_a_template_s_command_is_taken_and_answered_as_a_list(staff):
    response = staff.post(
        "/api/templates/", {**TEMPLATE, "command": ["sh", "-c", "echo hi > /tmp/x"]}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["command"] == ["sh", "-c", "echo hi > /tmp/x"]
    stored = ContainerTemplate.objects.get(name="web").command
    assert stored == ["sh", "-c", "echo hi > /tmp/x"], stored


@pytest.mark.parametrize("command", ["sleep 600", ["sleep", 600], {"argv": ["true"]}])
def test_a_template_command_that_is_not_a_list_of_strings_is_400_and_saves_nothing(staff, command):
    response = staff.post("/api/templates/", {**TEMPLATE, "command": command}, format="json")
    error = assert_error(response, 400)
    assert "command" in error["details"], error
    assert not ContainerTemplate.objects.filter(name="web").exists()


def test_a_template_s_command_changed_by_patch_must_be_a_list_too(staff, template):
    url = f"/api/templates/{template.pk}/"
    assert_error(staff.patch(url, {"command": "sleep 5"}, format="json"), 400)
    response = staff.patch(url, {"command": ["sleep", "5"]}, format="json")
    assert response.status_code == 200, response.content
    template.refresh_from_db()
    assert template.command == ["sleep", "5"], template.command


def test_a_dag_node_s_command_given_as_a_string_is_refused(staff, template):
    nodes = [{"key": "a", "template": "sleeper", "command": "echo hi"}]
    response = staff.post("/api/dag-templates/", {"name": "d", "nodes": nodes}, format="json")
    error = assert_error(response, 400, "invalid_dag")
    assert "command" in error["message"], error
    assert not DagTemplate.objects.exists()


def test_a_dag_node_s_command_list_is_stored_as_given(staff, template):
    nodes = [{"key": "a", "template": "sleeper", "command": ["sh", "-c", "echo hi"]}]
    response = staff.post("/api/dag-templates/", {"name": "d", "nodes": nodes}, format="json")
    assert response.status_code == 201, response.content
    stored = DagTemplate.objects.get(name="d").nodes[0]["command"]
    assert stored == ["sh", "-c", "echo hi"], stored


def test_the_schema_says_a_command_is_an_array_of_strings(staff):
    schemas = staff.get("/api/schema/?format=json").json()["components"]["schemas"]
    for name in ("TemplateInputRequest", "TemplateOutput"):
        command = schemas[name]["properties"]["command"]
        assert command["type"] == "array" and command["items"]["type"] == "string", (name, command)


def test_the_migrations_turn_a_stored_string_into_sh_c_and_keep_lists(template):
    shell = TemplateFactory(name="shell")
    ContainerTemplate.objects.filter(pk=shell.pk).update(command="echo a && echo b")
    ContainerTemplate.objects.filter(pk=template.pk).update(command=["sleep", "600"])
    empty = TemplateFactory(name="empty")
    ContainerTemplate.objects.filter(pk=empty.pk).update(command="")
    importlib.import_module("containers.migrations.0014_command_is_a_list").strings_to_lists(
        apps, None
    )
    commands = dict(ContainerTemplate.objects.values_list("name", "command"))
    assert commands == {
        "shell": ["sh", "-c", "echo a && echo b"],
        "sleeper": ["sleep", "600"],
        "empty": [],
    }, commands


def test_the_dags_migration_turns_node_and_snapshot_strings_into_sh_c(owner, template):
    from dags.services import dag_run_start, dag_template_save

    dag = dag_template_save(name="d", nodes=[{"key": "a", "template": "sleeper"}])
    run = dag_run_start(dag=dag, owner=owner, actor="test")
    DagTemplate.objects.filter(pk=dag.pk).update(
        nodes=[{**dag.nodes[0], "command": "echo $HOME > x"}]
    )
    graph = [{**node, "command": "exit 3"} for node in DagRun.objects.get(pk=run.pk).graph]
    templates = {
        key: {**snapshot, "command": "sleep 1"}
        for key, snapshot in DagRun.objects.get(pk=run.pk).templates.items()
    }
    DagRun.objects.filter(pk=run.pk).update(graph=graph, templates=templates)
    importlib.import_module("dags.migrations.0004_command_is_a_list").strings_to_lists(apps, None)
    node = DagTemplate.objects.get(pk=dag.pk).nodes[0]
    assert node["command"] == ["sh", "-c", "echo $HOME > x"], node
    run = DagRun.objects.get(pk=run.pk)
    assert [n["command"] for n in run.graph] == [["sh", "-c", "exit 3"]], run.graph
    snapshots = [t["command"] for t in run.templates.values()]
    assert snapshots == [["sh", "-c", "sleep 1"]], run.templates
