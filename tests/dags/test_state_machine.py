"""Every allowed and every forbidden move of runs and nodes (contract §7)."""

from __future__ import annotations

import itertools

import pytest
from django_fsm import TransitionNotAllowed

from dags.models import DagNodeRun, DagRun
from dags.states import NODE_TRANSITIONS, RUN_TRANSITIONS, NodeStatus, RunStatus

RUN_ARGS = {"failed": ("why",), "cancelling": ("why",)}
NODE_ARGS = {"failed": ("why",), "skipped": ("why",)}
NODE_KWARGS = {"running": {"instance_id": None, "instance_name": "x"}}


def test_the_tables_are_the_contracts():
    assert {
        "pending": {"running", "cancelled"},
        "running": {"succeeded", "failed", "cancelling"},
        "cancelling": {"cancelled", "failed"},
        "succeeded": set(),
        "failed": {"running"},
        "cancelled": set(),
    } == RUN_TRANSITIONS
    assert {
        "waiting": {"ready", "skipped", "cancelled"},
        "ready": {"running", "failed", "cancelled"},
        "running": {"succeeded", "failed", "cancelled"},
        "succeeded": set(),
        "failed": {"ready", "waiting"},
        "skipped": {"waiting"},
        "cancelled": set(),
    } == NODE_TRANSITIONS


@pytest.mark.parametrize(("source", "target"), list(itertools.product(RunStatus, RunStatus)))
def test_run_transition(source, target):
    run = DagRun(status=source)
    move = getattr(run, f"mark_{target}", None)
    if move is None:  # pending has no transition into it
        assert target == RunStatus.PENDING
        return
    if target in RUN_TRANSITIONS[source]:
        move(*RUN_ARGS.get(target, ()))
        assert run.status == target
    else:
        with pytest.raises(TransitionNotAllowed):
            move(*RUN_ARGS.get(target, ()))
        assert run.status == source


@pytest.mark.parametrize(("source", "target"), list(itertools.product(NodeStatus, NodeStatus)))
def test_node_transition(source, target):
    node = DagNodeRun(status=source)
    if target == NodeStatus.WAITING and source not in ("failed", "skipped"):
        with pytest.raises(TransitionNotAllowed):
            node.mark_waiting()
        return
    move = node.transition_method(target)
    if target in NODE_TRANSITIONS[source]:
        move(*NODE_ARGS.get(target, ()), **NODE_KWARGS.get(target, {}))
        assert node.status == target
    else:
        with pytest.raises(TransitionNotAllowed):
            move(*NODE_ARGS.get(target, ()), **NODE_KWARGS.get(target, {}))
        assert node.status == source


def test_status_cannot_be_assigned():
    run = DagRun()
    with pytest.raises(AttributeError):
        run.status = RunStatus.SUCCEEDED
