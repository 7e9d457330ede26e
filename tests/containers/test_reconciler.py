"""The reconciler (contract §4 and §5) on the fake engine, plus template image status.

Instances are placed directly in a state with a container in the fake engine; the engine
is then changed behind gobrave's back (``set_state``) and one pass is run.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.functions import Now
from django.utils import timezone

from containers.engines.base import ContainerSpec, ContainerState
from containers.execution.images import template_images_refresh
from containers.execution.observe import OOM_KILLED, REMOVED_OUTSIDE, target_for
from containers.execution.reconciler import NIL_UUID, reconcile
from containers.installation import installation_id
from containers.models import (
    ContainerEvent,
    ContainerInstance,
    ContainerTemplate,
    OrphanContainer,
)
from containers.states import Status
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory, TemplateFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("only_test_runtimes")]


@pytest.fixture
def place(fake_runtime, template, engine):
    """An instance in ``status`` whose container the fake engine shows as ``engine_status``."""

    def make(
        status: str,
        engine_status: str | None = "running",
        *,
        exit_code: int | None = None,
        memory: int | None = None,
        **fields,
    ) -> ContainerInstance:
        instance = InstanceFactory(status=status, runtime=fake_runtime, template=template)
        spec = {**instance.spec, "memory": memory}
        ContainerInstance.objects.filter(pk=instance.pk).update(spec=spec, **fields)
        if engine_status is not None:
            runtime_id = engine.create(ContainerSpec(**{**spec, "mounts": []}))
            if engine_status != "created":
                engine.set_state(runtime_id, engine_status, exit_code=exit_code)
            ContainerInstance.objects.filter(pk=instance.pk).update(container_id=runtime_id)
        return ContainerInstance.objects.get(pk=instance.pk)

    return make


def stored(instance) -> ContainerInstance:
    return ContainerInstance.objects.get(pk=instance.pk)


def history(instance) -> list[tuple[str, str, str]]:
    rows = ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id")
    return [(row.from_status, row.to_status, row.actor) for row in rows]


def outbox_row(
    instance, status: str, *, lease_in: float | None = None, held: float | None = None
) -> OutboxEvent:
    """The instance's request row, its times on the database's clock (as the relay sets
    them): a lease running out in ``lease_in`` seconds, an attempt begun ``held`` ago."""
    row = RequestFactory(
        instance=instance,
        status=status,
        available_at=Now(),
        claim_token=uuid.uuid4() if status == "processing" else None,
    )
    OutboxEvent.objects.filter(pk=row.pk).update(
        lease_expires_at=None if lease_in is None else Now() + dt.timedelta(seconds=lease_in),
        started_at=None if held is None else Now() - dt.timedelta(seconds=held),
        sent_at=Now() if status == "sent" else None,
    )
    return row


def age(instance, seconds: float) -> None:
    ContainerInstance.objects.filter(pk=instance.pk).update(
        status_changed_at=timezone.now() - dt.timedelta(seconds=seconds)
    )


@pytest.fixture
def host_clock(monkeypatch):
    """Run this host's clock ``offset`` seconds apart from the database's."""
    real = timezone.now

    def apart(offset: float) -> None:
        monkeypatch.setattr(timezone, "now", lambda: real() + dt.timedelta(seconds=offset))

    return apart


# -- target_for: the observation rules the reconciler and monitor share -------------------------


def _exited(code: int, oom: bool = False) -> ContainerState:
    return ContainerState("id", "gb-x", "exited", exit_code=code, oom_killed=oom)


def test_exit_137_under_a_memory_limit_unasked_counts_as_oom():
    observation = target_for(_exited(137), Status.RUNNING, memory_limited=True)
    assert (observation.target, observation.reason, observation.exit_code) == (
        Status.FAILED,
        OOM_KILLED,
        137,
    )


def test_exit_137_without_a_memory_limit_is_a_plain_failure():
    observation = target_for(_exited(137), Status.RUNNING)
    assert (observation.target, observation.reason) == (Status.FAILED, "exited with code 137")


def test_exit_137_after_a_stop_request_is_stopped_even_under_a_memory_limit():
    observation = target_for(_exited(137), Status.STOPPING, memory_limited=True)
    assert (observation.target, observation.exit_code) == (Status.STOPPED, 137)


def test_an_exited_container_of_a_stopped_instance_says_nothing_new():
    assert target_for(_exited(3), Status.STOPPED).target == Status.STOPPED


def test_the_oom_flag_still_wins_without_a_memory_limit_argument():
    assert target_for(_exited(137, oom=True), Status.CREATING).reason == OOM_KILLED


# -- missed transitions -------------------------------------------------------------------------


def test_running_instance_whose_container_exited_zero_becomes_stopped(place):
    instance = place(Status.RUNNING, "exited", exit_code=0)
    report = reconcile()
    assert (report.checked, report.changed) == (1, 1)
    assert (stored(instance).status, stored(instance).exit_code) == ("stopped", 0)
    assert history(instance)[-1] == ("running", "stopped", "reconciler")


def test_running_instance_whose_container_exited_non_zero_fails_with_the_code(place):
    instance = place(Status.RUNNING, "exited", exit_code=3)
    reconcile()
    row = stored(instance)
    assert (row.status, row.exit_code, row.status_reason) == ("failed", 3, "exited with code 3")


def test_running_instance_whose_container_vanished_fails_removed_outside(place, engine):
    instance = place(Status.RUNNING)
    engine.remove(instance.container_id)
    reconcile()
    row = stored(instance)
    assert (row.status, row.status_reason, row.runtime_missing) == (
        "failed",
        REMOVED_OUTSIDE,
        True,
    )


def test_running_instance_paused_outside_becomes_paused_then_running(place, engine):
    instance = place(Status.RUNNING)
    engine.set_state(instance.container_id, "paused")
    reconcile()
    assert stored(instance).status == "paused"
    engine.set_state(instance.container_id, "running")
    reconcile()
    assert stored(instance).status == "running"


def test_stopped_instance_whose_container_vanished_stays_stopped_marked_missing_once(place, engine):
    instance = place(Status.STOPPED, "exited", exit_code=0)
    engine.remove(instance.container_id)
    for _ in range(3):
        reconcile()
    row = stored(instance)
    assert (row.status, row.runtime_missing) == ("stopped", True)
    [kept] = ContainerEvent.objects.filter(instance_id=instance.pk)
    assert (kept.from_status, kept.to_status) == ("stopped", "stopped")
    assert REMOVED_OUTSIDE in kept.message


def test_stopped_instance_with_a_non_zero_exit_stays_stopped(place):
    instance = place(Status.STOPPED, "exited", exit_code=137)
    reconcile()
    assert stored(instance).status == "stopped"
    assert not ContainerEvent.objects.filter(instance_id=instance.pk).exists()


def test_nothing_changed_writes_no_history(place):
    instance = place(Status.RUNNING)
    for _ in range(3):
        reconcile()
    assert not ContainerEvent.objects.filter(instance_id=instance.pk).exists()


def test_a_pass_asks_nothing_more_of_a_container_listed_running_as_recorded(
    place, engine, monkeypatch
):
    """The engine's list (one call) vouches for a running instance whose running container
    it shows; only the others are inspected."""
    kept = place(Status.RUNNING, runtime_node_name="fake-node")
    exited = place(Status.RUNNING, "exited", exit_code=0, runtime_node_name="fake-node")
    unnamed = place(Status.RUNNING)  # its node name is still to backfill
    inspected = []
    real_inspect = engine.inspect
    monkeypatch.setattr(engine, "inspect", lambda ref: inspected.append(ref) or real_inspect(ref))
    report = reconcile()
    assert sorted(inspected) == sorted([exited.container_id, unnamed.container_id]), report
    assert report.checked == 3, report
    assert [stored(i).status for i in (kept, exited, unnamed)] == ["running", "stopped", "running"]
    assert stored(unnamed).runtime_node_name == "fake-node"


def test_exit_137_under_a_memory_limit_fails_the_instance_oomkilled(place):
    instance = place(Status.RUNNING, "exited", exit_code=137, memory=6 * 1024 * 1024)
    reconcile()
    assert (stored(instance).status, stored(instance).status_reason) == ("failed", "OOMKilled")


def test_node_name_and_container_id_are_backfilled(place, fake_runtime):
    instance = place(Status.RUNNING)
    runtime_id = instance.container_id
    ContainerInstance.objects.filter(pk=instance.pk).update(container_id="", runtime_node_name="")
    reconcile()
    row = stored(instance)
    assert (row.runtime_node_name, row.container_id) == ("fake-node", runtime_id)
    fake_runtime.refresh_from_db()
    assert fake_runtime.node_name == "fake-node"
    assert fake_runtime.last_seen_at is not None


def test_failed_instance_gets_its_node_name_but_keeps_its_state(place):
    instance = place(Status.FAILED, "running", runtime_node_name="")
    reconcile()
    assert (stored(instance).status, stored(instance).runtime_node_name) == ("failed", "fake-node")


# -- what the reconciler leaves to the workers ---------------------------------------------------


@pytest.mark.parametrize(
    "status", ["pending", "start_pending", "stop_pending", "delete_pending", "failed"]
)
def test_queued_requests_and_failed_are_not_compared(place, status):
    instance = place(status, "exited", exit_code=3, runtime_node_name="n")
    reconcile()
    assert stored(instance).status == status


@pytest.mark.parametrize("status", ["creating", "starting", "stopping", "deleting"])
def test_an_instance_whose_request_is_unfinished_is_left_to_its_worker(place, status):
    # e.g. starting a stopped container: the engine still shows the old exit code.
    instance = place(status, "exited", exit_code=137)
    outbox_row(instance, "processing", lease_in=60)
    report = reconcile()
    assert report.busy == 1
    assert stored(instance).status == status


def test_creating_without_a_request_in_flight_is_repaired(place):
    instance = place(Status.CREATING, "running")
    outbox_row(instance, "sent")
    reconcile()
    assert stored(instance).status == "running"


def test_deleting_with_its_container_gone_is_our_own_delete(place):
    instance = place(Status.DELETING, None)
    reconcile()
    assert stored(instance).status == "deleting"
    assert not ContainerEvent.objects.filter(instance_id=instance.pk).exists()


# -- start_timeout ------------------------------------------------------------------------------


def test_creating_past_start_timeout_is_failed_when_no_worker_holds_it(place, gobrave_config):
    gobrave_config(container={"start_timeout": 5})
    instance = place(Status.CREATING, "created")
    outbox_row(instance, "sent", held=6)  # the worker returned; the instance never settled
    report = reconcile()
    assert report.timed_out == 1
    row = stored(instance)
    assert row.status == "failed", (row.status, row.status_reason)
    assert row.status_reason.startswith(
        "start_timeout: still creating after holding its slot for 6s"
    ), row.status_reason
    assert history(instance)[-1] == ("creating", "failed", "reconciler")


@pytest.mark.parametrize(
    ("status", "engine_status", "fields", "row_status", "times"),
    [
        # Attempt 1 failed; waiting on its backoff, which holds no slot (contract §4), so
        # it is not slot-holding time.
        pytest.param(Status.CREATING, "created", {}, "pending", {}, id="waiting_for_a_retry"),
        pytest.param(
            Status.STARTING,
            "exited",
            {"exit_code": 0},
            "processing",
            {"lease_in": 30, "held": 600},
            id="while_its_request_is_leased",
        ),
        # The worker was killed: its row is due again and holds no slot, and is left to
        # its reclaim (which counts an attempt).
        pytest.param(
            Status.STARTING,
            "created",
            {},
            "processing",
            {"lease_in": -1, "held": 600},
            id="a_dead_workers_expired_lease",
        ),
    ],
)
def test_start_timeout_never_fails_an_instance_whose_request_is_under_way(
    place, gobrave_config, status, engine_status, fields, row_status, times
):
    gobrave_config(container={"start_timeout": 5})
    instance = place(status, engine_status, **fields)
    outbox_row(instance, row_status, **times)
    age(instance, 600)
    assert reconcile().timed_out == 0
    assert stored(instance).status == status


def test_within_start_timeout_nothing_happens(place, gobrave_config):
    gobrave_config(container={"start_timeout": 5})
    instance = place(Status.CREATING, "created")
    outbox_row(instance, "sent", held=3)
    assert reconcile().timed_out == 0
    assert stored(instance).status == "creating"


def test_a_host_clock_ahead_of_the_database_never_fails_a_leased_request(
    place, gobrave_config, host_clock
):
    """The lease (4 minutes left on the database's clock) protects the instance even
    though this host's clock says it ran out an hour ago."""
    gobrave_config(container={"start_timeout": 300})
    instance = place(Status.CREATING, "created")
    outbox_row(instance, "processing", lease_in=240, held=10)
    host_clock(+3600)
    assert reconcile().timed_out == 0
    row = stored(instance)
    assert row.status == "creating", (row.status, row.status_reason)


def test_a_host_clock_behind_the_database_still_fails_a_slot_held_too_long(
    place, gobrave_config, host_clock
):
    """Held for 400 s on the database's clock; this host's clock, an hour behind, would
    see a status change from the future and never time it out."""
    gobrave_config(container={"start_timeout": 300})
    instance = place(Status.CREATING, "created")
    outbox_row(instance, "sent", held=400)
    host_clock(-3600)
    assert reconcile().timed_out == 1
    row = stored(instance)
    assert row.status == "failed", (row.status, row.status_reason)
    assert "after holding its slot for 400s" in row.status_reason


def test_start_timeout_waits_for_an_engine_that_is_down(owner, gobrave_config):
    """Its instances keep their state until the engine answers (then a pass settles them)."""
    gobrave_config(container={"start_timeout": 5})
    down = RuntimeFactory(driver="docker", base_url="unix:///tmp/gobrave-no-engine.sock")
    instance = InstanceFactory(status=Status.CREATING, runtime=down)
    age(instance, 6)
    report = reconcile()
    assert report.timed_out == 0, str(report)
    row = stored(instance)
    assert row.status == "creating", (row.status, row.status_reason)
    assert "unreachable" in report.errors[0]
    down.refresh_from_db()
    assert down.last_error
    with pytest.raises(CommandError, match="could not be reconciled"):
        call_command("reconcile", "--once")


# -- orphans ------------------------------------------------------------------------------------


def orphan_spec(label: str = "", name: str = "") -> ContainerSpec:
    label = label or str(uuid.uuid4())
    return ContainerSpec(
        name=name or f"gb-{label}",
        image="gobrave-test-busybox:latest",
        labels={"io.gobrave.installation": installation_id(), "io.gobrave.instance": label},
    )


def test_an_orphan_is_reported_once_with_its_label(engine, fake_runtime):
    label = str(uuid.uuid4())
    runtime_id = engine.create(orphan_spec(label))
    for _ in range(2):
        reconcile()
    orphan = OrphanContainer.objects.get()
    assert (orphan.container_id, orphan.runtime, orphan.removed_at) == (
        runtime_id,
        fake_runtime,
        None,
    )
    assert orphan.last_seen_at >= orphan.first_seen_at
    [event] = ContainerEvent.objects.filter(kind="orphan")
    assert (str(event.instance_id), event.actor) == (label, "reconciler")
    assert engine.inspect(runtime_id) is not None  # policy report: left alone


def test_an_orphan_without_a_valid_label_is_recorded_under_the_nil_uuid(engine, fake_runtime):
    engine.create(orphan_spec("not-a-uuid", name="gb-strange"))
    reconcile()
    assert ContainerEvent.objects.get(kind="orphan").instance_id == NIL_UUID


def test_orphans_are_removed_under_policy_remove(engine, fake_runtime, gobrave_config):
    gobrave_config(container={"orphan_policy": "remove"})
    runtime_id = engine.create(orphan_spec())
    report = reconcile()
    assert (report.orphans_new, report.orphans_removed) == (1, 1)
    assert engine.inspect(runtime_id) is None
    assert OrphanContainer.objects.get().removed_at is not None


def test_an_orphan_removed_by_someone_else_is_marked_removed(engine, fake_runtime):
    runtime_id = engine.create(orphan_spec())
    reconcile()
    engine.remove(runtime_id)
    reconcile()
    assert OrphanContainer.objects.get().removed_at is not None


def test_containers_of_existing_instances_are_not_orphans(place):
    place(Status.PENDING, "created")  # e.g. made by a create whose worker died
    reconcile()
    assert not OrphanContainer.objects.exists()


def test_reconcile_command_prints_what_it_did(place, capsys):
    place(Status.RUNNING, "exited", exit_code=0)
    call_command("reconcile", "--once")
    assert "checked 1, changed 1" in capsys.readouterr().out


# -- template image status ----------------------------------------------------------------------


def test_image_status_is_refreshed_per_matching_runtime(engine, fake_runtime, capsys):
    present = TemplateFactory(image="here:1")
    missing = TemplateFactory(image="gone:1")
    nowhere = TemplateFactory(image="here:1", constraints={"engine": "none"})
    (engine.root / "missing-image-gone:1").write_text("")
    template_images_refresh()
    statuses = {
        t.pk: (t.image_status, t.image_checked_at is not None)
        for t in ContainerTemplate.objects.all()
    }
    assert statuses == {
        present.pk: ("present", True),
        missing.pk: ("missing", True),
        nowhere.pk: ("unknown", True),
    }
    call_command("refresh_images")
    assert "missing" in capsys.readouterr().out


# -- a pass is bounded by the active instances, not by the stopped ones at rest -------------------


@pytest.fixture
def fresh_turn(monkeypatch):
    from containers.execution.reconciler import rows  # where _stopped_rows finds it

    monkeypatch.setattr(rows, "_stopped_after", {})


def _missing(instances) -> int:
    return sum(stored(i).runtime_missing for i in instances)


@pytest.mark.usefixtures("fresh_turn")
def test_stopped_instances_are_compared_a_batch_at_a_time_in_turn(place, engine):
    gone = [place(Status.STOPPED, "exited", exit_code=0) for _ in range(5)]
    for instance in gone:
        engine.remove(instance.container_id)
    seen = []
    for _ in range(3):
        reconcile(stopped_batch=2)
        seen.append(_missing(gone))
    assert seen == [2, 4, 5]
    assert all(stored(i).status == "stopped" for i in gone)


@pytest.mark.usefixtures("fresh_turn")
def test_a_full_pass_compares_every_stopped_instance(place, engine):
    gone = [place(Status.STOPPED, "exited", exit_code=0) for _ in range(3)]
    for instance in gone:
        engine.remove(instance.container_id)
    reconcile(stopped_batch=None)
    assert _missing(gone) == 3


@pytest.mark.usefixtures("fresh_turn")
def test_a_stopped_instance_started_outside_is_seen_whatever_its_turn(place, engine):
    rest = [place(Status.STOPPED, "exited", exit_code=0) for _ in range(3)]
    woke = place(Status.STOPPED, "exited", exit_code=0)
    engine.set_state(woke.container_id, "running")
    reconcile(stopped_batch=0)
    assert stored(woke).status == "running"
    assert [stored(i).status for i in rest] == ["stopped"] * 3


@pytest.mark.usefixtures("fresh_turn")
def test_stopped_instances_at_rest_cost_a_pass_no_query_and_no_inspect_each(
    place, engine, monkeypatch
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    inspected = []
    real_inspect = engine.inspect
    monkeypatch.setattr(engine, "inspect", lambda ref: inspected.append(ref) or real_inspect(ref))

    def queries() -> int:
        reconcile()  # the first pass settles what is left to backfill
        with CaptureQueriesContext(connection) as captured:
            report = reconcile()
        assert not report.errors, report
        return len(captured.captured_queries)

    def make(n: int) -> None:
        for _ in range(n):
            place(Status.STOPPED, "exited", exit_code=0, runtime_node_name="fake-node")

    make(3)
    few = queries()
    make(27)
    inspected.clear()
    assert queries() == few
    assert inspected == []
