"""Engines that vanish: where creates go and what waits while an engine is unreachable.

On the real database, through the relay in-process, on fake engines (the real cut of a
Docker Engine over TCP is in test_engine_cut.py).
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db.models.functions import Now

from containers.engines import engine_for
from containers.execution.handlers import _apply, _begin, _record_created, _spec
from containers.execution.health import runtime_health_record
from containers.execution.monitor import cursor_for, event_apply
from containers.execution.reconciler import reconcile
from containers.models import ContainerEvent, ContainerInstance, OrphanContainer, Runtime
from containers.queues import RequestKind
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from containers.requests.slots import slot_count
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RuntimeFactory, TemplateFactory
from tests.processes import relay_drain

pytestmark = pytest.mark.django_db


drain = relay_drain


def shown(instance) -> tuple:
    row = ContainerInstance.objects.get(pk=instance.pk)
    requests = list(
        OutboxEvent.objects.filter(aggregate_id=str(instance.pk))
        .order_by("id")
        .values_list("kind", "status", "attempts", "outcome", "last_error")
    )
    return row.status, row.status_reason, row.runtime.name if row.runtime else None, requests


def make_due(instance) -> None:
    """A deferred request waits ENGINE_AWAY_RECHECK_SECONDS; the test does not."""
    OutboxEvent.objects.filter(aggregate_id=str(instance.pk), status="pending").update(
        available_at=Now()
    )


@pytest.fixture
def engines(tmp_path):
    """Two fake engines with the same labels: ``a`` sorts first by name."""
    labels = {"engine": "fake", "pool": "p"}
    a = RuntimeFactory(name="a-engine", base_url=f"fake://{tmp_path / 'a'}", labels=labels)
    b = RuntimeFactory(name="b-engine", base_url=f"fake://{tmp_path / 'b'}", labels=labels)
    return a, b


@pytest.fixture
def pooled(engines):
    return TemplateFactory(name="pooled", constraints={"pool": "p"})


def test_a_create_goes_to_a_matching_engine_that_answers(engines, pooled, owner):
    a, b = engines
    first = container_create_by_template(template=pooled, owner=owner, actor="t")
    assert drain() == ["sent"], shown(first)
    assert shown(first)[2] == a.name, shown(first)  # both answer, both empty: the name decides
    runtime_health_record(runtime_id=b.pk, reachable=True)
    runtime_health_record(runtime_id=a.pk, reachable=False, error="connection timed out")
    routed = container_create_by_template(template=pooled, owner=owner, actor="t")
    assert drain() == ["sent"], shown(routed)
    assert shown(routed)[2] == b.name, shown(routed)


def test_with_every_matching_engine_away_a_create_is_accepted_and_waits(engines, pooled, owner):
    """An unreachable engine receives no placement: a create whose every engine is away
    waits in ``pending``, unplaced, its request parked by the claim guard (never claimed,
    no attempt), and goes as soon as one answers again."""
    a, b = engines
    for runtime in engines:
        runtime_health_record(runtime_id=runtime.pk, reachable=False, error="no route to host")
    instance = container_create_by_template(template=pooled, owner=owner, actor="t")
    assert drain() == [], shown(instance)
    status, reason, runtime, requests = shown(instance)
    assert (status, runtime) == ("pending", None), shown(instance)
    assert reason.startswith("waiting: no engine with room: a-engine unreachable since "), reason
    assert ", b-engine unreachable since " in reason, reason
    assert [(kind, st, attempts, outcome) for kind, st, attempts, outcome, _ in requests] == [
        ("ContainerCreateRequest", "pending", 0, "deferred")
    ], shown(instance)
    assert slot_count() == 0
    assert engine_for(a).calls("create") == [] and engine_for(b).calls("create") == []
    # Looked at again later, still away: still waiting, still no attempt counted.
    make_due(instance)
    assert drain() == [], shown(instance)
    assert shown(instance)[3][0][2] == 0, shown(instance)
    # An engine answers again: that wakes the parked create, which goes there.
    runtime_health_record(runtime_id=b.pk, reachable=True)
    assert drain() == ["sent"], shown(instance)
    status, reason, runtime, _ = shown(instance)
    assert (status, reason, runtime) == ("running", "", "b-engine"), shown(instance)


def test_a_deferred_request_waits_before_it_is_claimed_again(engines, pooled, owner):
    for runtime in engines:
        runtime_health_record(runtime_id=runtime.pk, reachable=False, error="cut")
    instance = container_create_by_template(template=pooled, owner=owner, actor="t")
    assert drain() == [], shown(instance)
    row = OutboxEvent.objects.get(aggregate_id=str(instance.pk))
    ahead = OutboxEvent.objects.filter(pk=row.pk, available_at__gt=Now()).exists()
    assert ahead, (row.available_at, shown(instance))
    assert drain() == [], shown(instance)  # not looked at again at once


def test_a_healthy_create_is_not_held_up_by_one_waiting_for_its_engine(
    engines, owner, gobrave_config
):
    gobrave_config(container={"create_queue_max_concurrency": 1})
    a, b = engines
    on_a = TemplateFactory(name="on-a", constraints={"node": "a"})
    on_b = TemplateFactory(name="on-b", constraints={"node": "b"})
    Runtime.objects.filter(pk=a.pk).update(labels={"engine": "fake", "node": "a"})
    Runtime.objects.filter(pk=b.pk).update(labels={"engine": "fake", "node": "b"})
    runtime_health_record(runtime_id=a.pk, reachable=False, error="cut")
    waiting = container_create_by_template(template=on_a, owner=owner, actor="t")
    healthy = container_create_by_template(template=on_b, owner=owner, actor="t")
    outcomes = drain()
    assert "sent" in outcomes, (outcomes, shown(waiting))
    assert shown(healthy)[0] == "running", shown(healthy)
    assert shown(waiting)[:3] == ("pending", shown(waiting)[1], None), shown(waiting)
    assert "a-engine unreachable since" in shown(waiting)[1], shown(waiting)


def test_a_stop_waits_while_the_engine_is_away_and_runs_when_it_answers(
    fake_runtime, template, owner
):
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert drain() == ["sent"], shown(instance)
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="cut")
    container_stop(instance_id=instance.pk, actor="t")
    assert drain() == ["deferred"], shown(instance)
    status, reason, _, requests = shown(instance)
    assert status == "stop_pending" and "unreachable" in reason, shown(instance)
    assert requests[-1][2] == 0, shown(instance)
    assert engine_for(fake_runtime).calls("stop") == []
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=True)
    make_due(instance)
    assert drain() == ["sent"], shown(instance)
    assert shown(instance)[:2] == ("stopped", ""), shown(instance)


def test_the_reconciler_marks_an_engine_that_stops_answering_and_keeps_its_instances(
    fake_runtime, template, owner, gobrave_config
):
    gobrave_config(container={"start_timeout": 5})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert drain() == ["sent"], shown(instance)
    engine = engine_for(fake_runtime)
    (engine.root / "down").write_text("")
    # The container exits behind our back while the engine does not answer.
    engine.set_state(f"gb-{instance.pk}", "exited", exit_code=0)
    report = reconcile()
    row = Runtime.objects.get(pk=fake_runtime.pk)
    assert row.health == "unreachable" and row.health_since, (row.health, row.last_error)
    assert "did not answer" in row.last_error, row.last_error
    assert report.errors and report.changed == 0, str(report)
    assert shown(instance)[0] == "running", shown(instance)
    # Back: the next pass records it reachable and settles the instance.
    (engine.root / "down").unlink()
    reconcile()
    row = Runtime.objects.get(pk=fake_runtime.pk)
    assert row.health == "reachable", (row.health, row.last_error)
    assert shown(instance)[0] == "stopped", shown(instance)


def test_start_timeout_leaves_a_creating_instance_alone_while_its_engine_is_away(
    fake_runtime, template, owner, gobrave_config
):
    gobrave_config(container={"start_timeout": 5})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert drain() == ["sent"], shown(instance)
    # The worker returned, the instance never settled, and its slot is held long past.
    ContainerInstance.objects.filter(pk=instance.pk).update(status="creating")
    OutboxEvent.objects.filter(aggregate_id=str(instance.pk)).update(
        started_at=Now() - dt.timedelta(seconds=60)
    )
    (engine_for(fake_runtime).root / "down").write_text("")
    report = reconcile()
    assert report.timed_out == 0, str(report)
    assert shown(instance)[0] == "creating", shown(instance)
    (engine_for(fake_runtime).root / "down").unlink()
    reconcile()
    assert shown(instance)[0] == "running", shown(instance)


# --- a create whose container never came to exist is placed again (issue 27, item 3) --------


def _history(instance) -> list[str]:
    return list(
        ContainerEvent.objects.filter(instance_id=instance.pk)
        .order_by("created_at", "id")
        .values_list("message", flat=True)
    )


def _failed_once_on_a(engines, owner, *, due: bool = True, **extra) -> ContainerInstance:
    """A create placed on ``a-engine`` whose engine refused to make its container once:
    ``creating`` there, no container id, its retry waiting (made due now)."""
    a, _ = engines
    (engine_for(a).root / "fail-create").write_text("1")
    template = TemplateFactory(
        name="where",
        constraints={"pool": "p"},
        env={"ON": "$RUNTIME_NAME", "WS": "$WORKSPACE_PATH", "KEY": "s3cr3t-$RUNTIME_NAME"},
        secret_env=["KEY"],
        volumes=["$WORKSPACE_PATH:/data"],
    )
    instance = container_create_by_template(template=template, owner=owner, actor="t", **extra)
    assert drain() == ["retried"], shown(instance)
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_id, row.container_id) == ("creating", a.pk, ""), shown(row)
    assert row.spec["env"]["ON"] == "a-engine", row.spec
    if due:
        make_due(instance)
    return instance


def test_a_create_whose_container_never_existed_stays_on_its_engine_while_it_has_room(
    engines, owner
):
    """Its own place is not counted against its engine: ``a`` holds one place of one, its
    own, and ``b`` none, yet the retry stays on ``a`` (a move would be pointless)."""
    a, _ = engines
    Runtime.objects.filter(pk=a.pk).update(max_containers=1)
    instance = _failed_once_on_a(engines, owner)
    assert drain() == ["sent"], shown(instance)
    assert shown(instance)[:3] == ("running", "", "a-engine"), shown(instance)
    assert not [m for m in _history(instance) if m.startswith("placed again")], _history(instance)


@pytest.mark.parametrize("gone", ["unreachable", "cordoned", "disabled", "full"])
def test_a_create_whose_container_never_existed_is_placed_again_when_its_engine_goes(
    engines, owner, gone
):
    a, b = engines
    instance = _failed_once_on_a(engines, owner)
    if gone == "unreachable":
        runtime_health_record(runtime_id=a.pk, reachable=False, error="no route to host")
    elif gone == "full":  # another instance took a's one place meanwhile
        Runtime.objects.filter(pk=a.pk).update(max_containers=1)
        InstanceFactory(runtime=a, status="running")
    else:
        change = {"cordoned": True} if gone == "cordoned" else {"enabled": False}
        Runtime.objects.filter(pk=a.pk).update(**change)
    assert drain() == ["sent"], shown(instance)
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_id, row.status_reason) == ("running", b.pk, ""), shown(row)
    volume = row.spec["mounts"][0]["source"]
    assert row.spec["env"] == {"ON": "b-engine", "WS": volume, "KEY": "s3cr3t-b-engine"}, row.spec
    assert row.spec["placement"]["engine"] == "b-engine", row.spec
    assert "s3cr3t" not in str(row.spec["placement"]), row.spec["placement"]  # offsets only
    assert row.placement_reason.startswith("spread: b-engine"), row.placement_reason
    moved = [m for m in _history(instance) if m.startswith("placed again on b-engine")]
    assert moved and "never came to exist on a-engine" in moved[0], _history(instance)
    assert engine_for(a).created() == [] and engine_for(b).created() == [f"gb-{instance.pk}"]


def test_a_create_in_backoff_is_placed_again_as_soon_as_its_engine_is_found_gone(engines, owner):
    """Its retry waits on a backoff; the engine recorded unreachable makes it due now."""
    a, b = engines
    instance = _failed_once_on_a(engines, owner, due=False)
    assert drain() == [], shown(instance)  # backing off
    runtime_health_record(runtime_id=a.pk, reachable=False, error="no route to host")
    assert drain() == ["sent"], shown(instance)
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_id) == ("running", b.pk), shown(row)


def test_past_engine_lost_after_a_create_whose_container_never_existed_is_placed_again(
    engines, owner, gobrave_config
):
    """Not given up with its lost engine ("engine lost"): it never reached it."""
    from containers.execution.engine_loss import runtime_engine_lost

    a, b = engines
    gobrave_config(container={"engine_lost_after": 600.0})
    instance = _failed_once_on_a(engines, owner)
    runtime_health_record(runtime_id=a.pk, reachable=False, error="no route to host")
    Runtime.objects.filter(pk=a.pk).update(health_since=Now() - dt.timedelta(seconds=601))
    assert runtime_engine_lost(runtime_id=a.pk, after=600.0) == 0, shown(instance)
    assert shown(instance)[0] == "creating", shown(instance)
    assert drain() == ["sent"], shown(instance)
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_id, row.runtime_missing) == ("running", b.pk, False), shown(row)


def test_a_create_whose_container_exists_keeps_its_engine_and_a_dag_node_stays_pinned(
    engines, owner
):
    a, b = engines
    # The container exists on a (its start failed once): a start is not a placement.
    (engine_for(a).root / "fail-start").write_text("1")
    made = container_create_by_template(
        template=TemplateFactory(name="t", constraints={"pool": "p"}), owner=owner, actor="t"
    )
    assert drain() == ["retried"], shown(made)
    # A DAG run's node whose container never came to exist: pinned to its run's engine.
    node = _failed_once_on_a(engines, owner, runtime=a)
    runtime_health_record(runtime_id=a.pk, reachable=False, error="no route to host")
    make_due(made)
    assert sorted(drain()) == ["deferred", "deferred"], (shown(made), shown(node))
    for instance in (made, node):
        status, reason, runtime, _ = shown(instance)
        assert (status, runtime) == ("creating", "a-engine"), shown(instance)
        assert "unreachable since" in reason, shown(instance)
    assert engine_for(b).calls("create") == [], shown(node)


def test_what_a_create_placed_again_left_on_its_old_engine_is_removed_and_never_applied(
    engines, owner
):
    """A create whose earlier attempt did make its container on ``a`` (the answer was
    lost) is placed again on ``b``: that container is no event of the instance's, and
    the orphan scan removes it (never started) once ``a`` answers again."""
    a, b = engines
    instance = _failed_once_on_a(engines, owner)
    left = engine_for(a).create(_spec(ContainerInstance.objects.get(pk=instance.pk)))
    runtime_health_record(runtime_id=a.pk, reachable=False, error="timed out")
    assert drain() == ["sent"], shown(instance)
    assert shown(instance)[:3] == ("running", "", "b-engine"), shown(instance)
    runtime_health_record(runtime_id=a.pk, reachable=True)
    report = reconcile()
    assert engine_for(a).inspect(left) is None, str(report)
    orphan = OrphanContainer.objects.get(runtime=a, container_id=left)
    assert orphan.removed_at is not None, vars(orphan)
    # Its create and its removal, as a's monitor reads them: not the instance's business.
    cursor = cursor_for(a)
    events = engine_for(a).event_log()
    outcomes = [event_apply(runtime=a, cursor=cursor, event=event) for event in events]
    assert [e.action for e in events] == ["create", "destroy"], events
    assert outcomes == ["ignored", "ignored"], outcomes
    assert shown(instance)[:3] == ("running", "", "b-engine"), (shown(instance), str(report))


def _claimed(instance) -> OutboxEvent:
    """The instance's create request, claimed now under a fresh token and a live lease
    (as a worker's ``_begin`` finds it)."""
    live = Now() + dt.timedelta(hours=1)
    rows = OutboxEvent.objects.filter(aggregate_id=str(instance.pk), kind=RequestKind.CREATE)
    rows.update(status="processing", claim_token=uuid.uuid4(), lease_expires_at=live)
    return rows.get()


@pytest.mark.parametrize("where", ["home", "elsewhere"])
def test_a_create_placed_again_or_kept_home_drops_the_reason_it_waited_with(engines, owner, where):
    """As its retry begins on ``a`` again, or on ``b`` (``a`` cordoned), the instance no
    longer says why it waited: it is on its way (``creating``) where it is placed."""
    a, b = engines
    instance = _failed_once_on_a(engines, owner)
    stale = "waiting: no engine with room: a-engine full"
    ContainerInstance.objects.filter(pk=instance.pk).update(status_reason=stale)
    if where == "elsewhere":
        Runtime.objects.filter(pk=a.pk).update(cordoned=True)
    _begin(_claimed(instance), ready="pending", doing="creating", gated=True)
    row = ContainerInstance.objects.get(pk=instance.pk)
    placed = a if where == "home" else b
    got = (row.status, row.runtime_id, row.status_reason)
    assert got == ("creating", placed.pk, ""), shown(row)


def _stale_worker_and_its_successor(engines, owner):
    """W1 places a create on ``a`` and goes into its engine calls; its lease lapses, the
    operator cordons ``a``, the row is claimed again and W2 places it again on ``b``.
    Returns W1's and W2's instances as each one's ``_begin`` left it."""
    a, b = engines
    made = container_create_by_template(
        template=TemplateFactory(name="pooled-stale", constraints={"pool": "p"}),
        owner=owner,
        actor="t",
    )
    w1 = _begin(_claimed(made), ready="pending", doing="creating", gated=True)
    assert (w1.status, w1.runtime_id) == ("creating", a.pk), shown(made)
    Runtime.objects.filter(pk=a.pk).update(cordoned=True)
    w2 = _begin(_claimed(made), ready="pending", doing="creating", gated=True)
    assert (w2.status, w2.runtime_id) == ("creating", b.pk), shown(made)
    return w1, w2


def test_a_stale_worker_never_records_nor_starts_its_old_engines_container(engines, owner):
    """W1 comes back from ``a`` after the instance was placed again on ``b``: it records
    nothing, removes the container it made on ``a`` and is superseded (never two
    containers started for one instance)."""
    w1, _ = _stale_worker_and_its_successor(engines, owner)
    engine_a = engine_for(w1.runtime)
    made_on_a = engine_a.create(_spec(w1))
    assert _record_created(w1, engine_a, made_on_a) is False, shown(w1)
    row = ContainerInstance.objects.get(pk=w1.pk)
    stored = (row.status, row.runtime.name, row.container_id)
    assert stored == ("creating", "b-engine", ""), shown(w1)
    assert engine_a.inspect(made_on_a) is None, engine_a.calls()
    assert engine_a.calls("start") == [], engine_a.calls()
    removed = [m for m in _history(w1) if m.startswith("removing container")]
    assert removed and "placed again on b-engine" in removed[0], _history(w1)


def test_a_stale_worker_that_started_its_old_engines_container_undoes_it_on_apply(engines, owner):
    """Past its start on ``a`` (however it got there), W1's last step finds the instance
    placed on ``b``: nothing of ``a``'s is recorded, its container is removed (the
    history says why), and the request is superseded."""
    w1, _ = _stale_worker_and_its_successor(engines, owner)
    engine_a = engine_for(w1.runtime)
    made_on_a = engine_a.create(_spec(w1))
    engine_a.start(made_on_a, _spec(w1))
    assert _apply(w1, engine_a, made_on_a, "creating") is False, shown(w1)
    row = ContainerInstance.objects.get(pk=w1.pk)
    stored = (row.status, row.runtime.name, row.container_id, row.runtime_node_name)
    assert stored == ("creating", "b-engine", "", ""), shown(w1)
    assert engine_a.inspect(made_on_a) is None, engine_a.calls()
    removed = [m for m in _history(w1) if m.startswith("removing container")]
    assert removed and "placed again on b-engine" in removed[0], _history(w1)


# --- a start that waits for its engine can be cancelled (issue 27, item 3) ------------------


def _stopped_on(runtime, template, owner) -> ContainerInstance:
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert drain() == ["sent"], shown(instance)
    container_stop(instance_id=instance.pk, actor="t")
    assert drain() == ["sent"], shown(instance)
    assert shown(instance)[:3] == ("stopped", "", runtime.name), shown(instance)
    return instance


def _away(runtime, how: str) -> None:
    if how == "unreachable":
        runtime_health_record(runtime_id=runtime.pk, reachable=False, error="no route to host")
    else:
        Runtime.objects.filter(pk=runtime.pk).update(enabled=False)


@pytest.mark.parametrize("how", ["disabled", "unreachable"])
def test_a_start_waiting_for_its_engine_can_be_deleted_by_its_user(
    fake_runtime, template, owner, how
):
    instance = _stopped_on(fake_runtime, template, owner)
    _away(fake_runtime, how)
    container_start(instance_id=instance.pk, actor="user:alice")
    drain()
    status, reason, _, requests = shown(instance)
    waits = "is disabled" if how == "disabled" else "unreachable since"
    assert status == "start_pending" and waits in reason, shown(instance)
    result = container_delete(instance_id=instance.pk, actor="user:alice")
    assert (result.queued, result.instance.status) == (True, "delete_pending"), shown(instance)
    drain()
    start = OutboxEvent.objects.get(aggregate_id=str(instance.pk), kind=RequestKind.START)
    assert (start.status, start.outcome) == ("sent", "superseded"), shown(instance)
    if how == "disabled":  # the engine answers: the delete runs
        assert not ContainerInstance.objects.filter(pk=instance.pk).exists(), shown(instance)
        assert engine_for(fake_runtime).inspect(f"gb-{instance.pk}") is None
    else:  # it waits for its engine (or an operator's decommission), no attempt counted
        status, reason, _, requests = shown(instance)
        assert status == "delete_pending" and "unreachable since" in reason, shown(instance)
        assert requests[-1][1:3] == ("pending", 0), shown(instance)


def test_a_start_waiting_for_its_disabled_engine_can_be_stopped_by_its_user(
    fake_runtime, template, owner
):
    instance = _stopped_on(fake_runtime, template, owner)
    _away(fake_runtime, "disabled")
    container_start(instance_id=instance.pk, actor="user:alice")
    assert drain() == [], shown(instance)
    assert shown(instance)[:2] == ("start_pending", "waiting: engine of runtime "
        f"{fake_runtime.name} is disabled"), shown(instance)  # fmt: skip
    result = container_stop(instance_id=instance.pk, actor="user:alice")
    assert (result.queued, result.instance.status) == (True, "stop_pending"), shown(instance)
    assert sorted(drain()) == ["sent", "superseded"], shown(instance)
    assert shown(instance)[:2] == ("stopped", ""), shown(instance)
    # One start, the create's: the cancelled one never reached the engine.
    assert len(engine_for(fake_runtime).calls("start")) == 1, shown(instance)


def test_a_start_under_way_whose_retry_waits_for_its_disabled_engine_can_be_deleted(
    fake_runtime, template, owner
):
    instance = _stopped_on(fake_runtime, template, owner)
    (engine_for(fake_runtime).root / "fail-start").write_text("1")
    container_start(instance_id=instance.pk, actor="user:alice")
    assert drain() == ["retried"], shown(instance)
    assert shown(instance)[0] == "starting", shown(instance)
    _away(fake_runtime, "disabled")
    make_due(instance)
    assert drain() == [], shown(instance)  # its retry is set aside: the engine is disabled
    result = container_delete(instance_id=instance.pk, actor="user:alice")
    assert (result.queued, result.instance.status) == (True, "delete_pending"), shown(instance)
    assert sorted(drain()) == ["sent", "superseded"], shown(instance)
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists(), shown(instance)
    assert engine_for(fake_runtime).inspect(f"gb-{instance.pk}") is None
