"""DAG validation when saved: cycles named, unknown keys and templates, size (contract §7)."""

from __future__ import annotations

import pytest

from dags.errors import DagInvalid
from dags.graph import MAX_NODES, clean_nodes, find_cycle, topological
from dags.models import DagTemplate
from dags.services import dag_template_save
from tests.factories import TemplateFactory


def refusal(nodes) -> str:
    with pytest.raises(DagInvalid) as caught:
        clean_nodes(nodes)
    return caught.value.message


def test_a_cycle_is_refused_and_named():
    message = refusal(
        [
            {"key": "a", "template": "t", "depends_on": ["c"]},
            {"key": "b", "template": "t", "depends_on": ["a"]},
            {"key": "c", "template": "t", "depends_on": ["b"]},
        ]
    )
    assert message.startswith("cycle: ")
    cycle = message.removeprefix("cycle: ").split(" -> ")
    assert cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([{"key": "a", "template": "t", "depends_on": ["zz"]}], "depends on unknown node 'zz'"),
        ([{"key": "a", "template": "t", "depends_on": ["a"]}], "node a: depends on itself"),
        ([{"key": "a", "template": "t"}, {"key": "a", "template": "t"}], "key is used twice"),
        ([{"key": "a", "template": "t", "retries": -1}], "retries must be"),
        ([{"key": "a", "template": "t", "colour": "red"}], "unknown field 'colour'"),
        ([{"key": "../x", "template": "t"}], "nodes[0].key"),
        ([{"key": "a"}], "template must be"),
        ([{"key": "a", "template": "t", "env": {"1x": "y"}}], "not a valid variable name"),
        ([], "at least one node"),
        ("a", "at least one node"),
    ],
)
def test_bad_nodes_are_refused_with_what_is_wrong(nodes, expected):
    assert expected in refusal(nodes)


def test_more_than_200_nodes_are_refused_and_200_are_fine():
    nodes = [{"key": f"n{i}", "template": "t"} for i in range(MAX_NODES + 1)]
    assert "at most 200 nodes" in refusal(nodes)
    assert len(clean_nodes(nodes[:MAX_NODES])) == MAX_NODES


def test_topological_order_puts_dependencies_first():
    nodes = clean_nodes(
        [
            {"key": "d", "template": "t", "depends_on": ["b", "c"]},
            {"key": "b", "template": "t", "depends_on": ["a"]},
            {"key": "c", "template": "t", "depends_on": ["a"]},
            {"key": "a", "template": "t"},
        ]
    )
    assert topological(nodes) == ["a", "b", "c", "d"]
    assert find_cycle({"a": ["b"], "b": []}) is None


@pytest.mark.django_db
def test_saving_refuses_an_unknown_template_and_changes_nothing():
    TemplateFactory(name="known")
    with pytest.raises(DagInvalid) as caught:
        dag_template_save(
            name="d",
            nodes=[{"key": "a", "template": "known"}, {"key": "b", "template": "ghost"}],
        )
    assert caught.value.message == "node b: unknown template 'ghost'"
    assert not DagTemplate.objects.exists()


@pytest.mark.django_db
def test_saving_refuses_a_cycle_and_keeps_the_previous_version():
    template = TemplateFactory(name="known")
    dag = dag_template_save(name="d", nodes=[{"key": "a", "template": "known"}])
    assert dag.nodes[0]["template"] == template.pk  # names are stored as ids
    with pytest.raises(DagInvalid, match="cycle: "):
        dag_template_save(
            name="d",
            dag=dag,
            nodes=[
                {"key": "a", "template": "known", "depends_on": ["b"]},
                {"key": "b", "template": "known", "depends_on": ["a"]},
            ],
        )
    dag.refresh_from_db()
    assert [n["key"] for n in dag.nodes] == ["a"]
