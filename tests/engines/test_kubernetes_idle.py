"""Idle culling on Kubernetes (issue 28): whether a cluster serves the metrics API is
asked when its runtime is checked or saved and stored on the row, a template's
``idle_timeout`` is refused where it is not served (or not known yet), and the metrics
API's rates count as idle only from the first of an unbroken series of quiet looks.

On ``kube_cluster``: the API emulator and fake kubelet of ``tests/kube``, with the metrics
API served or not (``Emulator.serve_metrics``).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from containers.engines.base import ContainerSpec, EngineError
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from containers.errors import InvalidSpec
from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate, Runtime
from tests.engines.kube_harness import engine_for_cluster
from tests.processes import PATIENCE

IMAGE = "gobrave-test-busybox:latest"


def _runtime(kube, name: str = "kube") -> Runtime:
    """A row saved directly (never asked: ``serves_stats`` empty)."""
    return kube.runtime_row(name)


def _idler() -> ContainerTemplate:
    from containers.spec.template_services import template_create

    return template_create(
        name="idler", image=IMAGE, constraints={"engine": "kube"}, idle_timeout=600
    )


def test_the_engine_asks_the_cluster_whether_it_serves_the_metrics_api(kube):
    engine = engine_for_cluster(kube)
    assert engine.stats_served() is True
    kube.emulator.serve_metrics(False)
    assert engine.stats_served() is False
    with kube.emulator.outage(), pytest.raises(EngineError):  # no answer is not a "no"
        engine.stats_served(timeout=2)


@pytest.mark.django_db
@pytest.mark.usefixtures("postgres")
def test_idle_timeout_follows_what_the_runtimes_check_found(kube):
    """Not checked yet, then a cluster without metrics-server: refused, saying why; the
    runtime checked again once the cluster serves the metrics API: accepted."""
    from containers.execution.health import runtime_health_check

    runtime = _runtime(kube)
    with pytest.raises(InvalidSpec, match="runtime kube has not been checked yet") as refused:
        _idler()
    assert refused.value.details["field"] == "idle_timeout"
    kube.emulator.serve_metrics(False)
    assert runtime_health_check(runtime=runtime, seconds=60) is True
    runtime.refresh_from_db()
    assert runtime.serves_stats is False, runtime.last_error
    with pytest.raises(InvalidSpec, match="runtime kube reports no CPU statistics.*metrics"):
        _idler()
    assert not ContainerTemplate.objects.filter(name="idler").exists()
    kube.emulator.serve_metrics(True)
    assert runtime_health_check(runtime=runtime, seconds=60) is True
    runtime.refresh_from_db()
    assert runtime.serves_stats is True
    assert _idler().idle_timeout == 600


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("postgres")
def test_a_runtime_saved_through_the_fleet_services_is_asked_for_the_metrics_api(kube):
    from containers.api.serializers import RuntimeOutputSerializer
    from containers.fleet.runtimes import runtime_create, runtime_update

    kube.emulator.serve_metrics(False)
    runtime = runtime_create(
        name="kube",
        driver=Runtime.Driver.KUBERNETES,
        kube_namespace=kube.namespace,
        kube_config=kube.kubeconfig_path,
        kube_context=kube.context,
        labels={"engine": "kube"},
    )
    assert runtime.serves_stats is False
    assert Runtime.objects.get(pk=runtime.pk).serves_stats is False
    assert RuntimeOutputSerializer(runtime).data["serves_stats"] is False  # the API shows it
    kube.emulator.serve_metrics(True)
    runtime = runtime_update(runtime_id=runtime.pk, actor="test", labels={"engine": "kube"})
    assert Runtime.objects.get(pk=runtime.pk).serves_stats is True
    with kube.emulator.outage():  # no answer: the last one stays
        runtime_update(runtime_id=runtime.pk, actor="test", labels={"engine": "kube"})
    assert Runtime.objects.get(pk=runtime.pk).serves_stats is True


def _pod_for(kube, instance: ContainerInstance, cpu: str) -> dict:
    """The instance's Pod, running with ``cpu`` as its metrics; returns the Pod."""
    engine = engine_for_cluster(kube)
    kube.kubelet.add_rule(name=instance.container_name, usage={"cpu": cpu, "memory": "8Mi"})
    spec = ContainerSpec(
        name=instance.container_name,
        image=IMAGE,
        labels={LABEL_INSTALLATION: "inst1", LABEL_INSTANCE: str(instance.id)},
        user="10001:10001",
        group_add=["10001"],
    )
    engine.start(engine.create(spec), spec)
    deadline = time.monotonic() + 10 * PATIENCE
    while engine.stats(instance.container_name) is None:
        assert time.monotonic() < deadline, engine.inspect(instance.container_name)
        time.sleep(0.02)
    return kube.emulator.store.get("pods", kube.namespace, instance.container_name)


def _set_cpu(kube, pod: dict, cpu: str) -> None:
    """What metrics-server reports for the Pod from now on."""
    usage = {c["name"]: {"cpu": cpu, "memory": "8Mi"} for c in pod["spec"]["containers"]}
    kube.emulator.store.set_usage(pod["metadata"]["uid"], usage)


@pytest.mark.django_db
@pytest.mark.usefixtures("postgres")
def test_one_quiet_window_after_a_busy_hour_does_not_cull_idle_timeout_of_them_does(kube):
    """metrics-server's figure is a rate over its last window: a Pod busy for an hour and
    quiet at the look is not idle for an hour; it is culled ``idle_timeout`` after the
    first of an unbroken series of quiet looks."""
    from containers.execution.policies import policies_pass
    from tests.factories import InstanceFactory, TemplateFactory

    runtime = _runtime(kube)
    t0 = timezone.now()
    instance = InstanceFactory(
        runtime=runtime,
        template=TemplateFactory(constraints={"engine": "kube"}),
        status="running",
    )
    policy = {"idle_timeout": 600.0, "idle_cpu_threshold": 0.1}
    ContainerInstance.objects.filter(pk=instance.pk).update(
        spec={**instance.spec, "policy": policy},
        idle_since=t0,
        container_id=instance.container_name,
    )
    pod = _pod_for(kube, instance, "900m")

    def at(seconds: int):
        report = policies_pass(now=t0 + dt.timedelta(seconds=seconds))
        row = ContainerInstance.objects.get(pk=instance.pk)
        # None once it left running (a stop request ends the watch)
        since = None if row.idle_since is None else (row.idle_since - t0).total_seconds()
        return report, row.status, since

    assert at(60)[1:] == ("running", 60)  # busy: idle from now at the earliest
    _set_cpu(kube, pod, "5m")
    report, status, since = at(3600)  # quiet at the look, after a busy hour
    assert (status, since, report.stopped_idle) == ("running", 3600, 0), str(report)
    report, status, since = at(4199)
    assert (status, since, report.stopped_idle) == ("running", 3600, 0), str(report)
    report, status, since = at(4200)  # idle_timeout after the first quiet look
    assert (status, report.stopped_idle) == ("stop_pending", 1), str(report)
    [culled] = ContainerEvent.objects.filter(instance_id=instance.pk, actor="policy")
    assert "idle_timeout: used less than 0.1 cores for 10m (last 0.005)" in culled.message
