"""A DAG run's nodes are exempt from the lifecycle policies: the run has cleanup policies of
its own, and a policy stop would fail the node (docs/operations.md, "Policies")."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from containers.execution.policies import policies_pass
from containers.models import ContainerInstance
from containers.requests.lifecycle import move
from containers.states import Status
from dags.models import DagNodeRun
from dags.runner import dag_run_advance
from dags.services import dag_run_start, dag_template_save

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres")]


def test_a_node_of_a_time_limited_template_is_never_stopped_by_a_policy(owner, template):
    template.max_lifetime = 60
    template.delete_stopped_after = 60
    template.save()
    dag = dag_template_save(name="exempt", nodes=[{"key": "a", "template": "sleeper"}])
    run = dag_run_start(dag=dag, owner=owner, actor="test")
    dag_run_advance(run_id=str(run.pk))
    node = DagNodeRun.objects.get(run=run, key="a")
    with transaction.atomic():
        instance = ContainerInstance.objects.select_for_update().get(pk=node.instance_id)
        move(instance, Status.CREATING, actor="worker")
        move(instance, Status.RUNNING, actor="worker")
    instance = ContainerInstance.objects.get(pk=node.instance_id)
    assert "policy" not in instance.spec
    assert (instance.stop_at, instance.idle_since) == (None, None)
    report = policies_pass(now=timezone.now() + dt.timedelta(days=30))
    assert (report.stopped_lifetime, report.deleted) == (0, 0)
    assert ContainerInstance.objects.get(pk=instance.pk).status == Status.RUNNING
