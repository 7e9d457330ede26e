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
