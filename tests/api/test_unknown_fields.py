"""Every endpoint that takes a body refuses fields it does not know (400, naming each),
before anything is written: a misspelt ``envv`` must not be silently dropped."""

from __future__ import annotations

import pytest

from containers.models import ContainerInstance, ContainerTemplate
from dags.models import DagRun, DagTemplate
from dags.services import dag_template_save
from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db

TEMPLATE = {"name": "web", "image": "nginx:alpine"}
DAG = {"name": "pipe", "nodes": [{"key": "a", "template": "sleeper"}]}


def refused(response, *names: str) -> None:
    error = assert_error(response, 400, "invalid")
    assert set(names) <= set(error["details"]), error
    for name in names:
        assert error["details"][name] == ["Unknown field."], error


def test_a_create_naming_an_unknown_field_is_refused_and_writes_nothing(alice, template):
    body = {"template": "sleeper", "envv": {"A": "1"}, "nmae": "x"}
    refused(alice.post("/api/containers/", body, format="json"), "envv", "nmae")
    assert not ContainerInstance.objects.exists()


def test_a_template_create_with_an_unknown_field_is_refused(staff, template):
    response = staff.post("/api/templates/", {**TEMPLATE, "cmd": ["sh"]}, format="json")
    refused(response, "cmd")
    assert not ContainerTemplate.objects.filter(name="web").exists()


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_template_update_with_an_unknown_field_is_refused(staff, template, method):
    call = getattr(staff, method)
    response = call(f"/api/templates/{template.pk}/", {**TEMPLATE, "imagee": "evil"}, format="json")
    refused(response, "imagee")
    assert ContainerTemplate.objects.get(pk=template.pk).name == "sleeper"


def test_a_dag_template_create_or_update_with_an_unknown_field_is_refused(staff, template):
    refused(staff.post("/api/dag-templates/", {**DAG, "node": []}, format="json"), "node")
    assert not DagTemplate.objects.exists()
    dag = dag_template_save(name="kept", nodes=DAG["nodes"])
    response = staff.put(f"/api/dag-templates/{dag.pk}/", {**DAG, "x": 1}, format="json")
    refused(response, "x")
    assert DagTemplate.objects.get(pk=dag.pk).name == "kept"


def test_a_dag_run_create_with_an_unknown_field_is_refused(alice, template):
    dag = dag_template_save(name="pipe", nodes=DAG["nodes"])
    body = {"template": dag.pk, "params": {"a": 1}}
    refused(alice.post("/api/dag-runs/", body, format="json"), "params")
    assert not DagRun.objects.exists()
