"""The cold start decides the crash's runs only (contract §7, recover_running_dag_on_start)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from dags.models import DagNodeRun, DagRun
from dags.services import dag_run_start, dag_template_save
from outbox import liveness
from outbox.models import DispatcherBeat

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_runs(template, owner):
    dag = dag_template_save(name="one", nodes=[{"key": "a", "template": "sleeper"}])
    old, fresh = (dag_run_start(dag=dag, owner=owner, actor="t") for _ in range(2))
    long_ago = timezone.now() - dt.timedelta(minutes=5)
    DagRun.objects.filter(pk=old.pk).update(status_changed_at=long_ago)
    DagNodeRun.objects.filter(run=old).update(status_changed_at=long_ago)
    return old, fresh


def test_without_recovery_a_cold_start_fails_only_runs_nothing_moved_lately(
    two_runs, gobrave_config
):
    gobrave_config(container={"recover_running_dag_on_start": False})
    old, fresh = two_runs
    DagRun.objects.filter(pk__in=[old.pk, fresh.pk]).update(status="running")
    assert liveness.dispatcher_start(name="d1") is True
    assert DagRun.objects.get(pk=old.pk).status == "failed"
    assert DagRun.objects.get(pk=old.pk).reason == "not recovered at start"
    assert DagRun.objects.get(pk=fresh.pk).status == "running"  # live workers have it
    assert liveness.dispatcher_start(name="d2") is False  # d1 is alive: not cold
    assert DispatcherBeat.objects.count() == 2
