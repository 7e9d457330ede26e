"""Instances on an engine that stops answering (containers.execution.engine_loss).

While it is away they keep their state and say why; when it answers the reconciler
settles them and clears the reason; past ``engine_lost_after`` they are given up. On the
real database, through the relay in-process, on fake engines (``down`` makes one stop
answering). The real cut of a Docker Engine's link is in test_engine_cut.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now

from containers.engines import engine_for
from containers.execution.engine_loss import runtime_engine_lost
from containers.execution.health import runtime_health_record
from containers.execution.reconciler import reconcile
from containers.models import ContainerEvent, ContainerInstance, OrphanContainer, Runtime
from containers.requests.services import (
    container_create_by_template,
    container_start,
    container_stop,
)
from outbox.models import OutboxEvent
from tests.processes import relay_drain

pytestmark = pytest.mark.django_db

UNREACHABLE = "engine unreachable since "


def shown(*instances) -> str:
    lines = []
    for instance in instances:
        row = ContainerInstance.objects.filter(pk=instance.pk).first()
        if row is None:
            lines.append(f"{instance.pk}: gone")
            continue
        requests = list(
            OutboxEvent.objects.filter(aggregate_id=str(row.pk))
            .order_by("id")
            .values_list("kind", "status", "attempts", "outcome")
        )
        lines.append(
            f"{row.name}: {row.status} missing={row.runtime_missing} "
            f"reason={row.status_reason!r} requests={requests}"
        )
    return "\n".join(lines)


def row(instance) -> ContainerInstance:
    return ContainerInstance.objects.get(pk=instance.pk)


def kinds(instance) -> list[str]:
    return list(
        ContainerEvent.objects.filter(instance_id=instance.pk)
        .order_by("id")
        .values_list("kind", flat=True)
    )


def make_due() -> None:
    """A deferred request waits ENGINE_AWAY_RECHECK_SECONDS; the test does not."""
    OutboxEvent.objects.filter(status="pending").update(available_at=Now())


def away_for(runtime, seconds: float) -> None:
    """Pretend the runtime was recorded unreachable ``seconds`` ago."""
    Runtime.objects.filter(pk=runtime.pk).update(health_since=Now() - dt.timedelta(seconds=seconds))


@pytest.fixture
def down(fake_runtime):
    """Make the fake engine stop answering (``down()``) and answer again (``up()``)."""
    flag = engine_for(fake_runtime).root / "down"

    class Switch:
        def __call__(self) -> None:
            flag.write_text("")

        def up(self) -> None:
            flag.unlink(missing_ok=True)

    return Switch()


@pytest.fixture
def running(template, owner):
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"], shown(instance)
    assert row(instance).status == "running", shown(instance)
    return instance


@pytest.fixture
def stopped(template, owner):
    instance = container_create_by_template(template=template, owner=owner, actor="t", name="s")
    assert relay_drain() == ["sent"], shown(instance)
    container_stop(instance_id=instance.pk, actor="t")
    assert relay_drain() == ["sent"], shown(instance)
    assert row(instance).status == "stopped", shown(instance)
    return instance


def test_instances_on_an_engine_recorded_unreachable_keep_their_state_and_say_why(
    fake_runtime, running, stopped
):
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="no route to host")
    for instance, status in ((running, "running"), (stopped, "stopped")):
        now = row(instance)
        assert now.status == status, shown(instance)
        assert now.status_reason.startswith(UNREACHABLE), shown(instance)
        assert f"(runtime {fake_runtime.name}: no route to host)" in now.status_reason
        assert kinds(instance)[-1] == "engine_unreachable", kinds(instance)
    # Recorded again (every ping): the same reason, no second history entry.
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="no route to host")
    assert kinds(running).count("engine_unreachable") == 1, kinds(running)


def test_a_failed_instance_keeps_its_own_reason_while_its_engine_is_away(fake_runtime, running):
    engine_for(fake_runtime).set_state(f"gb-{running.pk}", "exited", exit_code=3)
    reconcile()
    assert row(running).status == "failed", shown(running)
    reason = row(running).status_reason
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="cut")
    assert row(running).status_reason == reason, shown(running)


def test_when_the_engine_answers_the_reconciler_settles_its_instances_and_clears_the_reason(
    fake_runtime, running, stopped, down
):
    down()
    engine_for(fake_runtime).set_state(f"gb-{running.pk}", "exited", exit_code=0)
    report = reconcile()
    assert report.errors and report.changed == 0, str(report)
    assert row(running).status == "running", shown(running)  # nobody knows better
    assert row(running).status_reason.startswith(UNREACHABLE), shown(running)
    down.up()
    reconcile()
    assert (row(running).status, row(running).status_reason) == ("stopped", ""), shown(running)
    assert (row(stopped).status, row(stopped).status_reason) == ("stopped", ""), shown(stopped)
    assert kinds(stopped)[-2:] == ["engine_unreachable", "engine_reachable"], kinds(stopped)
    assert Runtime.objects.get(pk=fake_runtime.pk).health == "reachable"


def test_a_request_whose_engine_goes_silent_mid_call_waits_without_an_attempt(
    fake_runtime, template, owner, down
):
    engine = engine_for(fake_runtime)
    (engine.root / "fail-create").write_text("1")  # the call fails...
    down()  # ...and the engine no longer answers a ping
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["deferred"], shown(instance)
    now = row(instance)
    assert now.status == "creating", shown(instance)  # kept, not failed, not retried
    assert now.status_reason.startswith(UNREACHABLE), shown(instance)
    request = OutboxEvent.objects.get(aggregate_id=str(instance.pk))
    assert (request.status, request.attempts) == ("pending", 0), shown(instance)
    assert Runtime.objects.get(pk=fake_runtime.pk).health == "unreachable"
    # Asked again while still away: still waiting, still no attempt. Its container never
    # came to exist, so its retry is placed again, and no engine has room: set aside by
    # the claim guard, saying why (its engine is away).
    make_due()
    assert relay_drain() == [], shown(instance)
    now = row(instance)
    assert (now.status, now.runtime_id) == ("creating", fake_runtime.pk), shown(instance)
    assert now.status_reason.startswith(UNREACHABLE), shown(instance)
    request = OutboxEvent.objects.get(aggregate_id=str(instance.pk))
    assert (request.status, request.attempts) == ("pending", 0), shown(instance)
    # Back: the reconciler records it, the create goes on and makes one container.
    down.up()
    reconcile()
    make_due()
    assert relay_drain() == ["sent"], shown(instance)
    assert (row(instance).status, row(instance).status_reason) == ("running", ""), shown(instance)
    assert engine.created() == [f"gb-{instance.pk}"]
    assert OutboxEvent.objects.get(aggregate_id=str(instance.pk)).attempts == 0


def test_a_failed_call_on_an_engine_that_still_answers_is_retried_as_before(
    fake_runtime, template, owner
):
    (engine_for(fake_runtime).root / "fail-create").write_text("1")
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain()[0] == "retried", shown(instance)
    assert Runtime.objects.get(pk=fake_runtime.pk).health != "unreachable"


def test_without_engine_lost_after_nothing_is_given_up_however_long_the_loss(
    fake_runtime, running, down
):
    down()
    reconcile()
    away_for(fake_runtime, 30 * 86400)
    report = reconcile()
    assert report.lost == 0, str(report)
    assert row(running).status == "running", shown(running)


def test_before_engine_lost_after_nothing_is_given_up(fake_runtime, running, down, gobrave_config):
    gobrave_config(container={"engine_lost_after": 600.0})
    down()
    reconcile()
    away_for(fake_runtime, 590)
    assert reconcile().lost == 0
    assert row(running).status == "running", shown(running)


def test_past_engine_lost_after_running_and_under_way_fail_and_stopped_are_marked_missing(
    fake_runtime, template, owner, running, stopped, down, gobrave_config
):
    gobrave_config(container={"engine_lost_after": 600.0})
    restarting = container_create_by_template(template=template, owner=owner, actor="t", name="r")
    assert relay_drain() == ["sent"], shown(restarting)
    down()
    reconcile()
    # Requests made while it is away wait: a start of a running instance (deferred), a
    # create (left unclaimed by the claim guard: no engine with room, placement's wait).
    container_start(instance_id=restarting.pk, actor="t")
    waiting = container_create_by_template(template=template, owner=owner, actor="t", name="w")
    assert relay_drain() == ["deferred"], shown(restarting, waiting)
    assert row(restarting).status == "start_pending", shown(restarting)
    assert row(waiting).runtime_id is None, shown(waiting)
    assert row(waiting).status_reason.startswith("waiting: no engine with room: fake unreachable")
    away_for(fake_runtime, 601)
    report = reconcile()
    assert report.lost == 3, (str(report), shown(running, restarting, stopped, waiting))
    for instance in (running, restarting):
        now = row(instance)
        assert (now.status, now.runtime_missing) == ("failed", True), shown(instance)
        assert now.status_reason.startswith("engine lost: runtime fake unreachable since ")
        assert kinds(instance)[-1] == "engine_lost", kinds(instance)
    now = row(stopped)
    assert (now.status, now.runtime_missing) == ("stopped", True), shown(stopped)
    assert kinds(stopped)[-1] == "engine_lost", kinds(stopped)
    assert row(waiting).status == "pending", shown(waiting)  # a create is placement's
    # A start of the stopped one, missing, fails at once (it would wait for nothing).
    # The start that waited was woken when its instance failed: it finds it so,
    # superseded, no engine call.
    container_start(instance_id=stopped.pk, actor="t")
    assert sorted(relay_drain()) == ["dead", "superseded"], shown(stopped, restarting)
    now = row(stopped)
    assert now.status == "failed", shown(stopped)
    assert now.status_reason.startswith(f"start failed: container gb-{stopped.pk} is missing")
    assert row(restarting).status == "failed", shown(restarting)
    # Given up once: a second pass changes nothing.
    assert reconcile().lost == 0


def test_containers_of_given_up_instances_that_turn_up_are_removed_and_stopped_ones_adopted(
    fake_runtime, running, stopped, down, gobrave_config
):
    gobrave_config(container={"engine_lost_after": 600.0})  # orphan_policy stays "report"
    down()
    reconcile()
    away_for(fake_runtime, 601)
    assert reconcile().lost == 2, shown(running, stopped)
    # The engine comes back with both containers: it had kept them all along.
    down.up()
    report = reconcile()
    assert report.orphans_removed == 1, (str(report), shown(running, stopped))
    engine = engine_for(fake_runtime)
    assert engine.inspect(f"gb-{running.pk}") is None  # the given-up run does not go on
    orphan = OrphanContainer.objects.get(runtime=fake_runtime)
    assert orphan.name == f"gb-{running.pk}" and orphan.removed_at is not None
    now = row(running)
    assert (now.status, now.runtime_missing) == ("failed", True), shown(running)
    assert now.status_reason.startswith("engine lost"), shown(running)
    # The stopped instance's container (the owner's files) is its own again.
    now = row(stopped)
    assert (now.status, now.runtime_missing, now.status_reason) == ("stopped", False, "")
    assert engine.inspect(f"gb-{stopped.pk}") is not None
    assert engine.created() == [f"gb-{running.pk}", f"gb-{stopped.pk}"]  # nothing made again


def test_an_engine_that_answered_meanwhile_is_not_given_up(fake_runtime, running, down):
    down()
    reconcile()
    away_for(fake_runtime, 601)
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=True)
    assert runtime_engine_lost(runtime_id=fake_runtime.pk, after=600.0) == 0
    assert row(running).status == "running", shown(running)


def test_requests_deferred_while_away_are_due_as_soon_as_the_engine_answers(fake_runtime, running):
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="cut")
    container_stop(instance_id=running.pk, actor="t")
    assert relay_drain() == ["deferred"], shown(running)
    waiting = OutboxEvent.objects.filter(aggregate_id=str(running.pk), status="pending")
    assert waiting.filter(available_at__gt=Now()).exists(), shown(running)  # waits 5 s
    assert relay_drain() == [], shown(running)
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=True)
    assert relay_drain() == ["sent"], shown(running)  # at once, not 5 s later
    assert row(running).status == "stopped", shown(running)
