"""manage.py dag_run_start, dag_run_list and dag_run_cancel."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dags.models import DagEvent, DagRun
from dags.services import dag_template_save

pytestmark = pytest.mark.django_db


def run_command(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_start_list_and_cancel_a_run_from_the_command_line(template, owner):
    dag_template_save(
        name="pair",
        nodes=[{"key": "a", "template": "sleeper"}, {"key": "b", "template": "sleeper"}],
    )
    started = run_command("dag_run_start", "--template", "pair", "--user", "alice")
    run = DagRun.objects.get()
    assert started == f"started {run.pk} (pair, 2 nodes): pending\n"
    listed = run_command("dag_run_list")
    assert f"{run.pk}  pending" in listed and "waiting=2" in listed
    assert run_command("dag_run_cancel", str(run.pk)[:8], "--as", "bob") == (
        f"{run.pk}: cancelled\n"
    )
    assert DagEvent.objects.filter(run_id=run.pk, actor="user:bob").exists()
    with pytest.raises(CommandError, match="refused: no DAG template 'ghost'"):
        run_command("dag_run_start", "--template", "ghost", "--user", "alice")
    with pytest.raises(CommandError, match="unknown status"):
        run_command("dag_run_list", "--status", "weird")


def _start_waiting(monkeypatch, world) -> str:
    """``dag_run_start --wait`` on a one-node DAG; each pause of its wait lets ``world``
    move the run (one step per pause), as the runner would."""
    from dags.management.commands import dag_run_start as command

    dag_template_save(name="one", nodes=[{"key": "a", "template": "sleeper"}])
    monkeypatch.setattr(command.Command, "pause", lambda _self: world(DagRun.objects.get()))
    return run_command("dag_run_start", "--template", "one", "--user", "alice", "--wait")


def _succeed(run: DagRun) -> None:
    import uuid

    from django.db import transaction

    from dags.history import node_move, run_move

    with transaction.atomic():
        run = DagRun.objects.select_for_update().get(pk=run.pk)
        node = run.nodes.get()
        run_move(run, "running", actor="runner")
        node_move(node, "ready", actor="runner")
        node_move(node, "running", actor="runner", instance_id=uuid.uuid4(), instance_name="a-1")
        node_move(node, "succeeded", actor="runner")
        run_move(run, "succeeded", actor="runner")


def test_start_wait_prints_each_transition_and_exits_zero_when_the_run_succeeds(
    template, owner, monkeypatch
):
    out = _start_waiting(monkeypatch, _succeed)
    assert "run: pending → running" in out, out
    for move in ("waiting → ready", "ready → running", "running → succeeded"):
        assert f"a: {move}" in out, out
    assert out.rstrip().endswith("succeeded"), out


def test_start_wait_exits_non_zero_with_the_reason_when_the_run_fails(template, owner, monkeypatch):
    from dags.services import dag_run_fail

    with pytest.raises(CommandError, match=r"run .* ended failed: the engine caught fire"):
        _start_waiting(
            monkeypatch,
            lambda run: dag_run_fail(run_id=run.pk, reason="the engine caught fire", actor="t"),
        )
