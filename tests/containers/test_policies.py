"""The lifecycle policies' pass and the time limit's extension, on the fake engine.

The pass is called in the test's process with a ``now`` of the test's choosing, so a rule
that is due in an hour is tested now; the real processes and the real engine are in
test_docker_policies.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from containers.engines import engine_for
from containers.engines.fake import FakeEngine
from containers.errors import ExtensionNotAllowed, ExtensionRefused, InvalidSpec
from containers.execution.policies import policies_pass
from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate, Workspace
from containers.requests.extensions import container_extend
from containers.requests.lifecycle import instance_lock, move
from containers.requests.services import container_create_by_template, container_delete
from containers.spec.template_services import template_create, template_update
from containers.states import Status
from outbox.models import OutboxEvent
from tests.factories import TemplateFactory, UserFactory
from tests.placing import place
from tests.processes import relay_drain

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres", "only_test_runtimes")]

HOUR = 3600


def later(seconds: float) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def running(template, owner, **kwargs) -> ContainerInstance:
    """A new instance of ``template``, moved to running as a worker would move it."""
    instance = container_create_by_template(template=template, owner=owner, actor="test", **kwargs)
    placed = place(instance)  # placement happens when a create leaves pending
    with transaction.atomic():
        move(instance_lock(placed.id), Status.RUNNING, actor="test")
    return ContainerInstance.objects.get(pk=instance.pk)


def stopped(instance: ContainerInstance) -> ContainerInstance:
    with transaction.atomic():
        row = instance_lock(instance.id)
        move(row, Status.STOPPED, actor="test")
    return ContainerInstance.objects.get(pk=instance.pk)


def policy_requests(instance) -> list[tuple[str, str]]:
    rows = OutboxEvent.objects.filter(aggregate_id=str(instance.pk), payload__by="policy")
    return [(row.kind, row.payload["by"]) for row in rows.order_by("id")]


def policy_history(instance) -> list[str]:
    rows = ContainerEvent.objects.filter(instance_id=instance.pk, actor="policy")
    return list(rows.order_by("id").values_list("message", flat=True))


@pytest.fixture
def timed(fake_runtime):
    return TemplateFactory(name="timed", max_lifetime=HOUR, extend_max=HOUR, extendable_by="owner")


def test_a_run_past_max_lifetime_gets_one_ordinary_stop_request_by_policy(timed, owner):
    instance = running(timed, owner)
    assert policies_pass(now=later(HOUR - 60)).stopped_lifetime == 0
    assert policies_pass(now=later(HOUR + 1)).stopped_lifetime == 1
    assert policies_pass(now=later(HOUR + 2)).stopped_lifetime == 0  # idempotent
    assert ContainerInstance.objects.get(pk=instance.pk).status == Status.STOP_PENDING
    assert policy_requests(instance) == [("ContainerStopRequest", "policy")]
    [message] = policy_history(instance)
    assert message == "stop requested: max_lifetime: running longer than 1h"


def test_an_extension_pushes_the_stop_back(timed, owner):
    instance = running(timed, owner)
    container_extend(instance_id=instance.id, user=owner, seconds=1800, actor="user:alice")
    assert policies_pass(now=later(HOUR + 60)).stopped_lifetime == 0
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.extended_seconds) == (Status.RUNNING, 1800)
    assert policies_pass(now=later(HOUR + 1801)).stopped_lifetime == 1
    [message] = policy_history(instance)
    assert message.endswith("running longer than 1h (extended by 30m)")


def test_an_extension_past_extend_max_is_refused_and_changes_nothing(timed, owner):
    instance = running(timed, owner)
    container_extend(instance_id=instance.id, user=owner, seconds=HOUR - 10, actor="t")
    with pytest.raises(ExtensionRefused, match="10s of extension left"):
        container_extend(instance_id=instance.id, user=owner, seconds=11, actor="t")
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.extended_seconds == HOUR - 10


def test_an_extension_by_someone_the_template_does_not_name_is_refused(timed, owner):
    instance = running(timed, owner)
    with pytest.raises(ExtensionNotAllowed):
        container_extend(instance_id=instance.id, user=UserFactory(), seconds=60, actor="t")
    timed.extendable_by = "nobody"
    timed.save()
    mine = running(timed, owner, name="second")
    with pytest.raises(ExtensionNotAllowed, match="lets nobody extend it"):
        container_extend(instance_id=mine.id, user=owner, seconds=60, actor="t")
    staff = UserFactory(username="op", is_staff=True)
    with pytest.raises(ExtensionNotAllowed):
        container_extend(instance_id=mine.id, user=staff, seconds=60, actor="t")


def test_an_extension_without_a_running_time_limit_is_refused(template, owner):
    instance = running(template, owner)  # no max_lifetime anywhere
    with pytest.raises(ExtensionRefused, match="no time limit running"):
        container_extend(instance_id=instance.id, user=owner, seconds=60, actor="t")
    with pytest.raises(InvalidSpec):
        container_extend(instance_id=instance.id, user=owner, seconds=0, actor="t")


def test_a_dag_node_instance_is_exempt(timed, owner):
    instance = running(timed, owner, exempt_from_policies=True)
    assert instance.stop_at is None and "policy" not in instance.spec
    report = policies_pass(now=later(100 * HOUR))
    assert (report.stopped_lifetime, report.sampled) == (0, 0)
    assert ContainerInstance.objects.get(pk=instance.pk).status == Status.RUNNING


def test_a_stopped_instance_is_deleted_after_delete_stopped_after_its_history_kept(
    fake_runtime, owner
):
    template = TemplateFactory(delete_stopped_after=HOUR)
    instance = stopped(running(template, owner))
    assert policies_pass(now=later(HOUR - 60)).deleted == 0
    assert policies_pass(now=later(HOUR + 1)).deleted == 1
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.delete_at) == (Status.DELETE_PENDING, None)
    assert policy_requests(instance) == [("ContainerDeleteRequest", "policy")]
    assert policy_history(instance) == [
        "delete requested: delete_stopped_after: stopped for longer than 1h"
    ]


def test_an_unpause_keeps_the_runs_time_limit(timed, owner):
    instance = running(timed, owner)
    with transaction.atomic():
        row = instance_lock(instance.id)
        move(row, Status.PAUSED, actor="test")
        move(row, Status.RUNNING, actor="test")
    assert ContainerInstance.objects.get(pk=instance.pk).stop_at == instance.stop_at


@pytest.mark.parametrize("target", [Status.PAUSED, Status.STOP_PENDING, Status.START_PENDING])
def test_leaving_running_ends_the_idle_watch(fake_runtime, owner, target):
    """Only running rows are watched: one that left ``running`` with its ``idle_since``
    was never selected again and stayed first in ``instance_policy_idle_turn``."""
    instance = running(TemplateFactory(idle_timeout=600, idle_cpu_threshold=0.1), owner)
    ContainerInstance.objects.filter(pk=instance.pk).update(cpu_sample={"read_at": 1.0})
    assert instance.idle_since is not None
    with transaction.atomic():
        move(instance_lock(instance.id), target, actor="test")
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.idle_since, row.cpu_sample) == (target, None, None), row.cpu_sample


def test_the_migration_clears_the_idle_watch_of_rows_that_left_running(fake_runtime, owner):
    import importlib

    from django.apps import apps

    migration = importlib.import_module(
        "containers.migrations.0035_instance_idle_watch_only_running"
    )
    template = TemplateFactory(idle_timeout=600, idle_cpu_threshold=0.1)
    running(template, owner, name="kept")
    left = running(template, owner, name="left")
    sample = {"read_at": 1.0, "cpu_total_ns": 5}
    ContainerInstance.objects.update(cpu_sample=sample)
    # As a pause left it before the transitions cleared the watch.
    ContainerInstance.objects.filter(pk=left.pk).update(status=Status.PAUSED)
    migration.unwatch_rows_not_running(apps, None)
    rows = {
        row.name: (row.status, row.idle_since is not None, row.cpu_sample)
        for row in ContainerInstance.objects.all()
    }
    assert rows == {"kept": ("running", True, sample), "left": ("paused", False, None)}, rows


def test_an_unpause_restarts_the_idle_watch_and_keeps_the_time_limit(fake_runtime, owner):
    """The first look after an unpause must not count the pause as idle time: the watch
    starts again from the unpause, with no sample to average over the pause."""
    template = TemplateFactory(idle_timeout=600, idle_cpu_threshold=0.1, max_lifetime=HOUR)
    engine: FakeEngine = engine_for(fake_runtime)
    instance = running(template, owner)
    container = engine.create(_spec(instance))
    engine.start(container)
    engine.count_cpu()  # Docker's kind of figure: a counter, averaged between two looks
    engine.set_cpu(instance.container_name, 0.01)
    # It ran idle for 9 of its 10 minutes, was looked at, then paused.
    ContainerInstance.objects.filter(pk=instance.pk).update(
        container_id=container,
        idle_since=timezone.now() - dt.timedelta(minutes=9),
        cpu_sample={"read_at": 1.0, "cpu_total_ns": 5},
    )
    with transaction.atomic():
        row = instance_lock(instance.id)
        move(row, Status.PAUSED, actor="test")
    unpaused_at = timezone.now()
    with transaction.atomic():
        move(instance_lock(instance.id), Status.RUNNING, actor="test")
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.idle_since >= unpaused_at and row.cpu_sample is None, (row.idle_since, unpaused_at)
    assert row.stop_at == instance.stop_at, (row.stop_at, instance.stop_at)
    first = policies_pass(now=later(120))  # 11 minutes after the idle run began
    assert (first.sampled, first.stopped_idle) == (1, 0), str(first)
    assert ContainerInstance.objects.get(pk=instance.pk).status == Status.RUNNING
    again = policies_pass(now=later(601))  # idle for idle_timeout since the unpause
    assert (again.sampled, again.stopped_idle) == (1, 1), str(again)


def test_the_idle_watch_reads_its_partial_index_in_turn_order(fake_runtime, owner):
    from containers.execution.policies import idle_turn
    from tests.plans import plan_of

    # The index serves the watch's condition in its order.
    plan = plan_of(*idle_turn(200).query.sql_with_params())
    assert "instance_policy_idle_turn" in plan and "Sort" not in plan, plan


def test_a_restart_clears_the_pending_delete(fake_runtime, owner):
    template = TemplateFactory(delete_stopped_after=HOUR)
    instance = stopped(running(template, owner))
    assert instance.delete_at is not None
    with transaction.atomic():
        move(instance_lock(instance.id), Status.RUNNING, actor="test")
    assert policies_pass(now=later(HOUR + 1)).deleted == 0


def test_an_idle_container_is_culled_and_a_busy_one_is_not(fake_runtime, owner):
    """A counter (Docker's cumulative CPU time): its first look gives no figure, the
    second the average since; idle since the run began."""
    template = TemplateFactory(idle_timeout=600, idle_cpu_threshold=0.1)
    engine: FakeEngine = engine_for(fake_runtime)
    engine.count_cpu()
    idle, busy = running(template, owner, name="idle"), running(template, owner, name="busy")
    for instance, cores in ((idle, 0.01), (busy, 0.9)):
        container = engine.create(_spec(instance))
        engine.start(container)
        ContainerInstance.objects.filter(pk=instance.pk).update(container_id=container)
        engine.set_cpu(instance.container_name, cores)
    first = policies_pass(now=later(60))
    assert (first.sampled, first.unmeasured, first.stopped_idle) == (2, 2, 0), str(first)
    second = policies_pass(now=later(601))
    assert (second.sampled, second.stopped_idle) == (2, 1)
    assert ContainerInstance.objects.get(pk=idle.pk).status == Status.STOP_PENDING
    assert ContainerInstance.objects.get(pk=busy.pk).status == Status.RUNNING
    [message] = policy_history(idle)
    assert "idle_timeout: used less than 0.1 cores for 10m" in message
    assert engine.calls("stats").count(idle.container_name) <= 2  # one look per pass


def test_idle_culling_is_not_stalled_by_rows_the_engine_gives_no_figure_for(
    fake_runtime, owner, gobrave_config
):
    from django.conf import settings

    policies = settings.GOBRAVE["container"]["policies"]
    gobrave_config(container={"policies": {**policies, "batch_size": 2}})
    template = TemplateFactory(idle_timeout=600, idle_cpu_threshold=0.1)
    engine: FakeEngine = engine_for(fake_runtime)
    # No container on the engine: it has no figure for them, on every pass. Idle longest,
    # they came first in line (by idle_since) and took the whole batch every time.
    blind = [running(template, owner, name=f"blind{i}") for i in range(2)]
    ContainerInstance.objects.filter(pk__in=[b.pk for b in blind]).update(
        idle_since=timezone.now() - dt.timedelta(hours=1)
    )
    idle = running(template, owner, name="idle")
    container = engine.create(_spec(idle))
    engine.start(container)
    ContainerInstance.objects.filter(pk=idle.pk).update(container_id=container)
    engine.set_cpu(idle.container_name, 0.01)  # a rate: quiet since its run began
    ContainerInstance.objects.filter(pk=idle.pk).update(cpu_sample={"read_at": 0, "quiet": True})
    reports = [policies_pass(now=later(601 + i)) for i in range(2)]
    said = [str(report) for report in reports]
    assert [report.sampled for report in reports] == [2, 2], said
    assert sum(report.stopped_idle for report in reports) == 1, said
    assert sum(report.unmeasured for report in reports) == 3, said  # each blind row: a look
    states = dict(ContainerInstance.objects.values_list("name", "status"))
    assert states == {"blind0": "running", "blind1": "running", "idle": "stop_pending"}, said


def _running_on(engine: FakeEngine, instance: ContainerInstance, cores: float) -> None:
    container = engine.create(_spec(instance))
    engine.start(container)
    ContainerInstance.objects.filter(pk=instance.pk).update(container_id=container)
    engine.set_cpu(instance.container_name, cores)


def _idle_row(instance) -> tuple[str, dt.datetime, dict]:
    row = ContainerInstance.objects.get(pk=instance.pk)
    return row.status, row.idle_since, row.cpu_sample


def test_on_a_rate_engine_idle_time_counts_from_the_first_of_unbroken_quiet_looks(
    fake_runtime, owner
):
    """A rate (the Kubernetes metrics API's kind) speaks for its recent window only: a
    quiet look after a busy hour starts the count; a busy look, or a look without a
    figure, ends a series; only ``idle_timeout`` of unbroken quiet looks stops it."""
    template = TemplateFactory(idle_timeout=600, idle_cpu_threshold=0.1)
    engine: FakeEngine = engine_for(fake_runtime)
    instance = running(template, owner, name="rated")
    _running_on(engine, instance, 0.9)
    t0 = timezone.now()

    def at(seconds: float):
        report = policies_pass(now=t0 + dt.timedelta(seconds=seconds))
        return report, _idle_row(instance)

    report, (status, since, _) = at(60)
    assert (status, since) == ("running", t0 + dt.timedelta(seconds=60)), str(report)
    engine.set_cpu(instance.container_name, 0.01)
    # One quiet window an hour on: the first quiet look, not an idle hour.
    report, (status, since, sample) = at(3600)
    assert (status, since, sample["quiet"]) == ("running", t0 + dt.timedelta(seconds=3600), True)
    report, (status, since, _) = at(3900)
    assert (status, since) == ("running", t0 + dt.timedelta(seconds=3600)), str(report)
    engine.set_cpu(instance.container_name, 0.5)  # a busy look ends the series
    report, (status, since, _) = at(4100)
    assert (status, since) == ("running", t0 + dt.timedelta(seconds=4100)), str(report)
    engine.set_cpu(instance.container_name, 0.0)
    at(4200)  # a new series begins here...
    engine.set_state(instance.container_name, "paused")
    report, (status, since, sample) = at(4300)  # ...and a look without a figure ends it
    assert (report.unmeasured, sample["quiet"]) == (1, False), str(report)
    engine.set_state(instance.container_name, "running")
    report, (status, since, _) = at(4900)  # 700 s after the first series began: a new one
    assert (status, since, report.stopped_idle) == (
        "running",
        t0 + dt.timedelta(seconds=4900),
        0,
    ), str(report)
    report, (status, since, _) = at(5499)
    assert (status, report.stopped_idle) == ("running", 0), str(report)
    report, (status, since, _) = at(5500)
    assert (status, report.stopped_idle) == ("stop_pending", 1), str(report)
    [message] = policy_history(instance)
    assert "idle_timeout: used less than 0.1 cores for 10m (last 0.000)" in message


def _spec(instance):
    from containers.execution.handlers import _spec as spec_of

    return spec_of(instance)


def test_an_unused_workspace_is_removed_after_workspace_retention(
    fake_runtime, owner, gobrave_config
):
    from django.conf import settings

    gobrave_config(
        container={
            "policies": {**settings.GOBRAVE["container"]["policies"], "workspace_retention": HOUR}
        }
    )
    keeper = UserFactory(username="keeper")
    running(TemplateFactory(), keeper)
    unused = Workspace.objects.create(
        runtime=fake_runtime, owner=owner, kind="volume", source="gb-ws-alice", uid=1, gid=1
    )
    kept = Workspace.objects.create(
        runtime=fake_runtime, owner=keeper, kind="volume", source="gb-ws-keeper", uid=2, gid=2
    )
    assert policies_pass().workspaces_removed == 0
    assert Workspace.objects.get(pk=unused.pk).unused_since is not None
    assert policies_pass(now=later(HOUR + 1)).workspaces_removed == 1
    assert not Workspace.objects.filter(pk=unused.pk).exists()
    assert Workspace.objects.get(pk=kept.pk).unused_since is None
    removed = (engine_for(fake_runtime).root / "volumes-removed.log").read_text().split()
    assert removed == ["gb-ws-alice"]


def test_workspaces_are_kept_when_workspace_retention_is_off(fake_runtime, owner):
    Workspace.objects.create(
        runtime=fake_runtime, owner=owner, kind="volume", source="gb-ws-alice", uid=1, gid=1
    )
    assert policies_pass(now=later(1000 * HOUR)).workspaces_removed == 0
    assert Workspace.objects.get().unused_since is None


def _with_workspace(name: str, **fields) -> ContainerTemplate:
    volumes = [{"source": "$WORKSPACE_PATH", "target": "/work"}]
    return TemplateFactory(name=name, volumes=volumes, **fields)


def _deleted(instance) -> None:
    """Delete the instance as the worker does (its container removed, its row gone)."""
    container_delete(instance_id=instance.pk, actor="test")
    outcomes = relay_drain()
    assert outcomes and outcomes[-1] == "sent", outcomes
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()


def _workspace_made(instance) -> Workspace:
    relay_drain()  # the create: the worker makes the owner's workspace
    return Workspace.objects.get(owner_id=instance.owner_id, kind="volume")


def test_a_templates_workspace_retention_applies_and_the_longest_wins(fake_runtime, owner):
    """config.yml's workspace_retention is off: the templates' own values decide, the
    longest of the deleted instances that used the workspace."""
    short = _with_workspace("short", workspace_retention=HOUR)
    long = _with_workspace("long", workspace_retention=5 * HOUR)
    first = container_create_by_template(template=long, owner=owner, actor="test")
    workspace = _workspace_made(first)
    second = container_create_by_template(template=short, owner=owner, actor="test")
    relay_drain()
    assert Workspace.objects.get(pk=workspace.pk).retention is None
    _deleted(first)
    _deleted(second)  # the last one removed has the shorter retention: the longer stays
    row = Workspace.objects.get(pk=workspace.pk)
    recorded = (row.retention, row.retention_default, row.unused_since)
    assert recorded == (5 * HOUR, False, None), vars(row)
    assert policies_pass().workspaces_removed == 0  # marks it unused from now
    assert policies_pass(now=later(2 * HOUR)).workspaces_removed == 0
    assert policies_pass(now=later(5 * HOUR + 60)).workspaces_removed == 1
    assert not Workspace.objects.filter(pk=workspace.pk).exists()
    removed = (engine_for(fake_runtime).root / "volumes-removed.log").read_text().split()
    assert removed == [workspace.source]


def test_an_instance_without_a_template_value_brings_config_yml_s_into_the_longest(
    fake_runtime, owner, gobrave_config
):
    from django.conf import settings

    gobrave_config(
        container={
            "policies": {
                **settings.GOBRAVE["container"]["policies"],
                "workspace_retention": 3 * HOUR,
            }
        }
    )
    short = _with_workspace("short", workspace_retention=HOUR)
    plain = _with_workspace("plain")  # no value of its own: config.yml's, when the pass runs
    first = container_create_by_template(template=short, owner=owner, actor="test")
    workspace = _workspace_made(first)
    second = container_create_by_template(template=plain, owner=owner, actor="test")
    relay_drain()
    _deleted(first)
    _deleted(second)
    row = Workspace.objects.get(pk=workspace.pk)
    assert (row.retention, row.retention_default) == (HOUR, True), vars(row)
    assert policies_pass().workspaces_removed == 0
    assert policies_pass(now=later(2 * HOUR)).workspaces_removed == 0
    assert policies_pass(now=later(3 * HOUR + 60)).workspaces_removed == 1


def test_a_template_that_turns_workspace_retention_off_keeps_the_workspace(
    fake_runtime, owner, gobrave_config
):
    from django.conf import settings

    gobrave_config(
        container={
            "policies": {**settings.GOBRAVE["container"]["policies"], "workspace_retention": HOUR}
        }
    )
    keeper = _with_workspace("keeper", workspace_retention=0)
    instance = container_create_by_template(template=keeper, owner=owner, actor="test")
    workspace = _workspace_made(instance)
    _deleted(instance)
    assert Workspace.objects.get(pk=workspace.pk).retention == 0
    assert policies_pass().workspaces_removed == 0
    assert policies_pass(now=later(1000 * HOUR)).workspaces_removed == 0
    row = Workspace.objects.get(pk=workspace.pk)
    assert row.unused_since is None, vars(row)  # not watched at all


def test_workspace_retention_is_resolved_into_the_instance_and_validated(fake_runtime, owner):
    template = template_create(name="kept", image="busybox", workspace_retention=HOUR)
    instance = container_create_by_template(template=template, owner=owner, actor="test")
    assert instance.spec["policy"]["workspace_retention"] == HOUR
    with pytest.raises(InvalidSpec) as refused:
        template_update(template_id=template.pk, workspace_retention=-5)
    assert refused.value.details["field"] == "workspace_retention"
    assert ContainerTemplate.objects.get(pk=template.pk).workspace_retention == HOUR


def test_idle_timeout_on_a_runtime_without_cpu_statistics_is_refused(fake_runtime, monkeypatch):
    monkeypatch.setattr(FakeEngine, "reports_cpu", False)
    with pytest.raises(InvalidSpec, match="reports no CPU statistics") as refused:
        template_create(
            name="idler", image="busybox", constraints={"engine": "fake"}, idle_timeout=60
        )
    assert refused.value.details["field"] == "idle_timeout"
    template = template_create(name="timed", image="busybox", max_lifetime=60)
    with pytest.raises(InvalidSpec):
        template_update(template_id=template.pk, idle_timeout=60)
    assert template_update(template_id=template.pk, idle_timeout=0).idle_timeout == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_lifetime", -1), ("max_lifetime", "5m"), ("idle_cpu_threshold", 0),
     ("extendable_by", "everyone"), ("delete_stopped_after", True)],
)  # fmt: skip
def test_bad_policy_values_are_refused_naming_the_field(fake_runtime, field, value):
    with pytest.raises(InvalidSpec) as refused:
        template_create(name="bad", image="busybox", **{field: value})
    assert refused.value.details["field"] == field
    assert not ContainerTemplate.objects.filter(name="bad").exists()
