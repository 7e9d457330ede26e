"""Worker handlers (contract §4) through the relay, in-process, on the fake engine."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from containers.models import ContainerEvent, ContainerInstance
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from containers.requests.slots import slot_count
from outbox import registry, relay
from outbox.models import OutboxEvent
from outbox.services import outbox_retry_now
from tests.processes import outbox_rows, relay_drain

pytestmark = pytest.mark.django_db


drain = relay_drain


def _as(instance, status: str, **fields) -> None:
    """Put ``instance`` in ``status`` by hand, placed on the fake runtime as the create
    handler would have placed it on leaving ``pending`` (``containers.requests.placing``)."""
    from containers.models import Runtime

    fake = Runtime.objects.get(name="fake").pk
    ContainerInstance.objects.filter(pk=instance.pk).update(
        runtime_id=fake, status=status, **fields
    )


@pytest.fixture
def create(template, owner):
    def make(**kwargs):
        return container_create_by_template(template=template, owner=owner, actor="t", **kwargs)

    return make


def status(instance) -> str:
    return ContainerInstance.objects.get(pk=instance.pk).status


def history(instance) -> list[tuple[str, str]]:
    rows = ContainerEvent.objects.filter(instance_id=instance.pk).order_by("id")
    return [(row.from_status, row.to_status) for row in rows]


def test_create_runs_the_container_and_records_each_step(create, engine):
    instance = create()
    assert drain() == ["sent"]
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert stored.status == "running"
    assert stored.container_id and stored.runtime_node_name == "fake-node"
    assert history(instance) == [("", "pending"), ("pending", "creating"), ("creating", "running")]
    assert engine.calls("create") == [f"create gb-{instance.pk}"]
    assert engine.inspect(f"gb-{instance.pk}").status == "running"


def test_create_that_exits_zero_at_once_ends_stopped(create, engine):
    (engine.root / "exit-on-start").write_text("0")
    instance = create()
    drain()
    assert status(instance) == "stopped"


def test_create_that_exits_non_zero_ends_failed_with_the_code(create, engine):
    (engine.root / "exit-on-start").write_text("3")
    instance = create()
    drain()
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.exit_code) == ("failed", 3)
    assert "exited with code 3" in stored.status_reason


def test_capacity_denied_defers_without_an_attempt(create, gobrave_config):
    gobrave_config(container={"create_queue_max_concurrency": 1})
    busy, waiting = create(), create()
    _as(busy, "creating")
    OutboxEvent.objects.filter(aggregate_id=str(busy.pk)).update(status="sent")
    assert drain(rounds=1) == ["deferred"]
    row = OutboxEvent.objects.get(aggregate_id=str(waiting.pk))
    assert (row.status, row.attempts, row.outcome) == ("pending", 0, "deferred")
    assert status(waiting) == "pending"
    assert row.available_at > timezone.now()


def test_a_freed_slot_makes_deferred_creates_due_at_once(create, gobrave_config):
    gobrave_config(container={"create_queue_max_concurrency": 1}, outbox={"poll_interval": 30})
    first, second = create(), create()
    _as(first, "creating")
    OutboxEvent.objects.filter(aggregate_id=str(first.pk)).update(status="sent")
    drain(rounds=1)
    assert OutboxEvent.objects.get(aggregate_id=str(second.pk)).available_at > timezone.now()
    container_delete(instance_id=first.pk, actor="t")  # creating -> delete_pending frees it
    assert OutboxEvent.objects.get(aggregate_id=str(second.pk)).available_at <= timezone.now()
    drain()
    assert status(second) == "running"


def test_a_create_waiting_for_its_retry_holds_no_slot(create, engine, gobrave_config):
    """contract §4: backoff holds no slot; the retry passes the gate again and still runs."""
    gobrave_config(container={"create_queue_max_concurrency": 1})
    # A backoff no slow machine outlasts: the failing create is not due again until
    # "retry now" makes it so.
    gobrave_config(outbox={"backoff_base": 600, "backoff_cap": 600})
    (engine.root / "fail-create").write_text("1")
    failing = create()
    assert drain() == ["retried"]
    row = OutboxEvent.objects.get(aggregate_id=str(failing.pk))
    assert (status(failing), row.status, row.attempts) == ("creating", "pending", 1), row.last_error
    assert slot_count() == 0
    healthy = create()
    assert drain() == ["sent"]  # the failing one is not due yet; the healthy one is not held
    assert status(healthy) == "running"
    outbox_retry_now(event_id=row.id)
    assert drain() == ["sent"]
    row.refresh_from_db()
    assert (status(failing), row.status, row.attempts) == ("running", "sent", 1), row.last_error


def _a_retry_behind_a_holder(create, engine, gobrave_config):
    """Cap 1: one create failed once and waits for its retry; another holds the slot
    (``creating``, its request done)."""
    gobrave_config(container={"create_queue_max_concurrency": 1})
    (engine.root / "fail-create").write_text("1")
    failing = create()
    assert drain() == ["retried"]
    holder = create()
    _as(holder, "creating")
    OutboxEvent.objects.filter(aggregate_id=str(holder.pk)).update(status="sent")
    return failing, holder


def _holds_the_slot(instance) -> None:
    """``instance`` holds a slot: ``creating``, its request done (the engine's start
    not yet seen)."""
    _as(instance, "creating")
    OutboxEvent.objects.filter(aggregate_id=str(instance.pk)).update(status="sent")


def test_a_due_retry_is_not_claimed_while_the_cap_is_full_and_is_once_a_slot_frees(
    create, engine, gobrave_config
):
    """contract §4: claiming the retry of a ``creating`` instance makes it a slot, so
    with the only slot held the claim leaves it pending (no attempt, no deferral); once
    the slot frees, the next claim takes it, and the claimed retry is the one slot."""
    failing, holder = _a_retry_behind_a_holder(create, engine, gobrave_config)
    assert slot_count() == 1  # the holder; the failing one waits for its retry
    row = OutboxEvent.objects.get(aggregate_id=str(failing.pk))
    outbox_retry_now(event_id=row.id)
    assert relay.claim("create", 16) == [], outbox_rows()
    row.refresh_from_db()
    assert (row.status, row.attempts, row.outcome) == ("pending", 1, "retried"), outbox_rows()
    assert row.claim_token is None and slot_count() == 1, outbox_rows()
    assert len(engine.calls("create")) == 1  # only the first attempt reached the engine
    container_delete(instance_id=holder.pk, actor="t")  # creating -> delete_pending frees it
    [(event_id, token)] = relay.claim("create", 16)
    assert event_id == row.id
    assert slot_count() == 1, outbox_rows()  # claimed: the failing one holds the slot now
    assert relay.execute(event_id, token) == "sent"
    row.refresh_from_db()
    assert (status(failing), row.status, row.attempts) == ("running", "sent", 1), outbox_rows()
    assert slot_count() == 0


def test_a_dead_workers_create_is_not_reclaimed_past_the_cap(create, engine, gobrave_config):
    """A ``creating`` instance whose worker died (its lease ran out) holds no slot, and
    reclaiming it would take one: with the cap full the row stays as it was."""
    gobrave_config(container={"create_queue_max_concurrency": 1})
    crashed = create()
    [(event_id, token)] = relay.claim("create", 16)
    assert relay.begin(event_id, token)
    _as(crashed, "creating")
    OutboxEvent.objects.filter(id=event_id).update(lease_expires_at=timezone.now())
    assert slot_count() == 0, outbox_rows()
    holder = create()
    _holds_the_slot(holder)
    assert relay.claim("create", 16) == [], outbox_rows()
    row = OutboxEvent.objects.get(id=event_id)
    assert (row.status, row.claim_token, row.attempts, row.reclaims) == (
        "processing",
        token,
        0,
        0,
    ), outbox_rows()
    container_delete(instance_id=holder.pk, actor="t")
    [(reclaimed, again)] = relay.claim("create", 16)
    assert reclaimed == event_id and slot_count() == 1, outbox_rows()
    assert relay.execute(reclaimed, again) == "sent"
    row.refresh_from_db()
    assert (status(crashed), row.status, row.attempts) == ("running", "sent", 1), outbox_rows()


def test_a_retry_passes_the_gate_again_before_calling_the_runtime(create, engine, gobrave_config):
    """The claim took a slot for the retry; its handler still checks the gate before the
    engine (here a holder appears between the claim and the handler, which no path
    makes, to see that the check is there)."""
    failing, holder = _a_retry_behind_a_holder(create, engine, gobrave_config)
    ContainerInstance.objects.filter(pk=holder.pk).update(status="pending")
    row = OutboxEvent.objects.get(aggregate_id=str(failing.pk))
    outbox_retry_now(event_id=row.id)
    [(event_id, token)] = relay.claim("create", 16)
    assert event_id == row.id
    _as(holder, "creating")
    assert relay.execute(event_id, token) == "deferred"
    row.refresh_from_db()
    assert (row.status, row.attempts, row.outcome) == ("pending", 1, "deferred"), outbox_rows()
    assert len(engine.calls("create")) == 1
    assert status(failing) == "creating"


def test_stop_then_start_then_delete(create, engine):
    instance = create()
    drain()
    container_stop(instance_id=instance.pk, actor="t")
    assert drain() == ["sent"]
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.exit_code) == ("stopped", 0)
    container_start(instance_id=instance.pk, actor="t")
    assert drain() == ["sent"]
    assert status(instance) == "running"
    container_delete(instance_id=instance.pk, actor="t")
    assert drain() == ["sent"]
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
    assert engine.inspect(f"gb-{instance.pk}") is None
    assert ContainerEvent.objects.filter(instance_id=instance.pk, kind="ContainerDeleted").exists()


def test_delete_of_a_queued_create_supersedes_the_create(create, engine):
    instance = create()
    container_delete(instance_id=instance.pk, actor="t")
    assert drain() == ["superseded", "sent"]
    assert engine.calls("create") == []
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()


def test_delete_queued_behind_a_stop_runs_after_it_and_supersedes_it(create, engine):
    instance = create()
    drain()
    container_stop(instance_id=instance.pk, actor="t")
    container_delete(instance_id=instance.pk, actor="t")
    assert drain() == ["superseded", "sent"]
    assert engine.calls("stop") == []
    assert [row.kind for row in OutboxEvent.objects.order_by("id")] == [
        "ContainerCreateRequest",
        "ContainerStopRequest",
        "ContainerDeleteRequest",
    ]
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()


def test_every_handler_replayed_after_success_changes_nothing(create, engine):
    instance = create()
    drain()
    container_stop(instance_id=instance.pk, actor="t")
    drain()
    container_start(instance_id=instance.pk, actor="t")
    drain()
    container_delete(instance_id=instance.pk, actor="t")
    drain()
    calls_before = engine.calls()
    events_before = list(ContainerEvent.objects.values_list("id", flat=True))
    for row in OutboxEvent.objects.order_by("id"):
        assert registry.route(row.kind).handler(row) == "superseded"
    assert engine.calls() == calls_before
    assert list(ContainerEvent.objects.values_list("id", flat=True)) == events_before


def test_image_missing_under_never_is_dead_and_fails_the_instance(create, engine):
    (engine.root / "missing-image-gobrave-test-busybox:latest").write_text("")
    instance = create()
    assert drain() == ["dead"]
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert stored.status == "failed"
    assert "missing and pull_policy is never" in stored.status_reason
    assert OutboxEvent.objects.get().last_error.endswith("pull_policy is never")


def test_start_of_a_container_removed_outside_gobrave_fails_with_that_reason(create, engine):
    instance = create()
    drain()
    container_stop(instance_id=instance.pk, actor="t")
    drain()
    engine.remove(f"gb-{instance.pk}")
    container_start(instance_id=instance.pk, actor="t")
    assert drain() == ["dead"]
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert stored.status == "failed"
    assert "removed outside gobrave" in stored.status_reason


def apply_finding_it_failed(instance, engine, source: str, **fields) -> None:
    """Fail the instance behind its worker's back (``fields`` set on the row too), then
    let the worker apply its ``source`` step to it."""
    from containers.execution.handlers import _apply

    _as(instance, "failed", **fields)
    stored = ContainerInstance.objects.get(pk=instance.pk)
    _apply(stored, engine, f"gb-{instance.pk}", source)


def test_worker_that_finds_its_instance_failed_removes_what_it_created(create, engine):
    instance = create()
    drain()
    apply_finding_it_failed(instance, engine, "creating")
    assert engine.inspect(f"gb-{instance.pk}") is None
    assert status(instance) == "failed"
    assert ContainerEvent.objects.filter(instance_id=instance.pk, kind="cleanup").exists()


def test_a_create_finding_its_instance_failed_by_its_own_exit_keeps_the_container(create, engine):
    """A stale worker (its lease lapsed while another finished the create; the container
    ran and exited 3, and the monitor failed the instance) never removes the user's exit
    and logs."""
    instance = create()
    drain()
    engine.set_state(f"gb-{instance.pk}", status="exited", exit_code=3)
    apply_finding_it_failed(instance, engine, "creating", exit_code=3)
    state = engine.inspect(f"gb-{instance.pk}")
    assert state is not None and state.exit_code == 3, state
    assert status(instance) == "failed"
    assert not ContainerEvent.objects.filter(instance_id=instance.pk, kind="cleanup").exists()


def test_a_start_finding_its_instance_failed_stops_but_keeps_the_container(create, engine):
    instance = create()
    drain()
    apply_finding_it_failed(instance, engine, "starting")
    state = engine.inspect(f"gb-{instance.pk}")
    assert state is not None and state.status == "exited"  # the user's container stays
    assert status(instance) == "failed"


def test_a_dead_create_does_not_fail_an_instance_a_later_delete_owns(create, engine):
    from django.db import transaction

    from containers.execution.handlers import on_dead

    instance = create()
    create_row = OutboxEvent.objects.get()
    _as(instance, "creating")
    container_delete(instance_id=instance.pk, actor="t")  # accepted mid-create
    with transaction.atomic():  # the create's runtime call failed for good meanwhile
        on_dead(create_row, "image repository not found")
    assert status(instance) == "delete_pending"
    assert ContainerEvent.objects.filter(instance_id=instance.pk, kind="dead_letter").exists()
    OutboxEvent.objects.filter(pk=create_row.pk).update(status="dead")
    assert drain() == ["sent"]  # the accepted delete still runs
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()


def test_a_dead_request_fails_the_instance_it_still_owns(create, engine):
    from django.db import transaction

    from containers.execution.handlers import on_dead

    instance = create()
    with transaction.atomic():
        on_dead(OutboxEvent.objects.get(), "image repository not found")
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert stored.status == "failed"
    assert "image repository not found" in stored.status_reason


def test_a_create_finding_its_instance_failed_removes_the_container_left_behind(create, engine):
    instance = create()
    # A worker made the container and recorded its id, then died before the start; the
    # reconciler failed the instance.
    from containers.execution.handlers import _spec

    made = engine.create(_spec(ContainerInstance.objects.get(pk=instance.pk)))
    _as(instance, "failed", container_id=made)
    assert drain() == ["superseded"], outbox_rows()
    assert engine.inspect(f"gb-{instance.pk}") is None
    assert ContainerInstance.objects.get(pk=instance.pk).container_id == ""
    assert ContainerEvent.objects.filter(instance_id=instance.pk, kind="cleanup").exists()


def _foreign(engine, instance, image: str) -> None:
    """Someone else's container holding the instance's name (no gobrave labels)."""
    from containers.engines.base import ContainerSpec

    engine.create(ContainerSpec(name=f"gb-{instance.pk}", image=image, labels={}))


def test_deleting_an_instance_whose_name_a_foreign_container_holds_leaves_that_container(
    create, engine, template
):
    instance = create()
    _foreign(engine, instance, template.image)
    assert drain() == ["dead"], outbox_rows()
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.container_id) == ("failed", ""), _shown(instance)
    container_delete(instance_id=instance.pk, actor="t")
    assert drain() == ["sent"], outbox_rows()
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
    held = engine.inspect(f"gb-{instance.pk}")
    assert held is not None and not held.labels, held


def test_a_create_finding_its_instance_failed_leaves_a_foreign_container_holding_its_name(
    create, engine, template
):
    instance = create()
    _foreign(engine, instance, template.image)
    _as(instance, "failed")
    assert drain() == ["superseded"], outbox_rows()
    held = engine.inspect(f"gb-{instance.pk}")
    assert held is not None and held.status == "created" and not held.labels, held


def test_a_create_finding_its_instance_failed_keeps_a_container_that_did_run(create, engine):
    instance = create()
    assert drain() == ["sent"]
    row = OutboxEvent.objects.get(aggregate_id=str(instance.pk))
    engine.set_state(f"gb-{instance.pk}", status="exited", exit_code=3)
    _as(instance, "failed")
    # The same create delivered again (its worker died before the outcome was written).
    OutboxEvent.objects.filter(pk=row.pk).update(status="pending", started_at=None)
    assert drain() == ["superseded"], outbox_rows()
    state = engine.inspect(f"gb-{instance.pk}")
    assert state is not None and state.exit_code == 3  # the user's exit and logs stay
    assert ContainerInstance.objects.get(pk=instance.pk).container_id == state.runtime_id


def test_the_engine_id_is_recorded_as_soon_as_the_container_is_created(
    create, engine, gobrave_config
):
    """A container the engine holds shows on its instance before it started; the retried
    create adopts it (one container, the same id) and starts it."""
    gobrave_config(outbox={"backoff_base": 600, "backoff_cap": 600})
    (engine.root / "fail-start").write_text("1")
    instance = create()
    assert drain() == ["retried"], outbox_rows()
    stored = ContainerInstance.objects.get(pk=instance.pk)
    held = engine.inspect(f"gb-{instance.pk}")
    assert held is not None and held.status == "created"
    assert (stored.status, stored.container_id) == ("creating", held.runtime_id)
    outbox_retry_now(event_id=OutboxEvent.objects.get(aggregate_id=str(instance.pk)).id)
    assert drain() == ["sent"], outbox_rows()
    stored.refresh_from_db()
    assert (stored.status, stored.container_id) == ("running", held.runtime_id)
    assert engine.created() == [f"gb-{instance.pk}"]


def test_a_delete_accepted_during_the_engine_create_leaves_the_container_unstarted(create, engine):
    from containers.execution.handlers import _record_created

    instance = create()
    _as(instance, "delete_pending")
    from containers.execution.handlers import _spec

    instance = ContainerInstance.objects.get(pk=instance.pk)  # placed, as its worker has it
    made = engine.create(_spec(instance))
    assert _record_created(instance, engine, made) is False  # not started
    assert engine.inspect(made).status == "created"
    assert ContainerInstance.objects.get(pk=instance.pk).container_id == made


def test_a_creating_instance_records_its_container_in_one_statement(
    create, engine, django_assert_num_queries
):
    """The common case of the create's step 3 is one UPDATE (its own commit); a retry
    that adopted the same container records the same id and goes on."""
    from containers.execution.handlers import _record_created, _spec

    instance = create()
    _as(instance, "creating")
    instance = ContainerInstance.objects.get(pk=instance.pk)  # placed, as its worker has it
    made = engine.create(_spec(instance))
    with django_assert_num_queries(1):
        assert _record_created(instance, engine, made) is True
    assert _record_created(instance, engine, made) is True
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.container_id) == ("creating", made), stored.status_reason
    assert engine.inspect(made).status == "created"  # started by the caller, not here


# --- why a request failed, in the engine's words (issue 31) -----------------------------------


def _shown(instance) -> str:
    stored = ContainerInstance.objects.get(pk=instance.pk)
    return f"{stored.status} {stored.status_reason!r}\n{outbox_rows()}"


def _database_now():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def test_a_retried_create_says_retrying_with_the_row_s_own_schedule(create, engine, gobrave_config):
    gobrave_config(outbox={"max_attempts": 8, "backoff_base": 30, "backoff_cap": 600})
    (engine.root / "fail-create").write_text("1")
    instance = create()
    before = _database_now()
    assert drain(rounds=1) == ["retried"]
    after = _database_now()
    stored, row = ContainerInstance.objects.get(pk=instance.pk), OutboxEvent.objects.get()
    entry = ContainerEvent.objects.get(instance_id=instance.pk, kind="retry")
    delay = entry.data["delay"]
    assert (stored.status, row.status, row.attempts) == ("creating", "pending", 1), _shown(instance)
    assert stored.status_reason == (
        f"retrying (attempt 1 of 8): injected create failure (0 left), next try in {delay:.0f} s"
    ), _shown(instance)
    assert 30 <= delay <= 45, entry.data
    # The delay shown is the row's: it is due that long after the retry was written.
    written = row.available_at - dt.timedelta(seconds=delay)
    assert before - dt.timedelta(milliseconds=1) <= written <= after, (before, written, after)
    assert (entry.from_status, entry.to_status, entry.message) == (
        "creating",
        "",
        stored.status_reason,
    ), entry.__dict__


def test_a_retry_that_succeeds_clears_the_retrying_reason(create, engine):
    (engine.root / "fail-create").write_text("1")
    instance = create()
    assert drain(rounds=1) == ["retried"]
    assert ContainerInstance.objects.get(pk=instance.pk).status_reason.startswith("retrying")
    outbox_retry_now(event_id=OutboxEvent.objects.get().id)
    assert drain() == ["sent"]
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.status_reason) == ("running", ""), _shown(instance)


def test_a_create_out_of_attempts_fails_saying_why_without_a_class_name(
    create, engine, gobrave_config
):
    gobrave_config(outbox={"max_attempts": 2})
    (engine.root / "fail-create").write_text("9")
    instance = create()
    assert drain(rounds=1) == ["retried"]
    outbox_retry_now(event_id=OutboxEvent.objects.get().id)
    assert drain() == ["dead"]
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.status_reason) == (
        "failed",
        "create failed: gave up after 2 attempts: injected create failure (7 left)",
    ), _shown(instance)
    assert "Traceback" in OutboxEvent.objects.get().last_error  # the whole story stays there


def test_a_permanent_engine_error_fails_at_once_in_the_engine_s_words(create, engine):
    (engine.root / "permanent-create").write_text("the engine refuses this spec")
    instance = create()
    assert drain() == ["dead"]
    stored, row = ContainerInstance.objects.get(pk=instance.pk), OutboxEvent.objects.get()
    assert (stored.status, stored.status_reason, row.attempts) == (
        "failed",
        "create failed: the engine refuses this spec",
        1,
    ), _shown(instance)
    failed = ContainerEvent.objects.get(instance_id=instance.pk, to_status="failed")
    assert (failed.kind, failed.message) == ("dead_letter", stored.status_reason)
    assert not ContainerEvent.objects.filter(instance_id=instance.pk, kind="retry").exists()
