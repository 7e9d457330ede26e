"""Fair share: owners waiting on the create queue are served round-robin, not in commit
order (contract §8). The claim itself on PostgreSQL, then the real dispatcher and cluster."""

from __future__ import annotations

import pytest
from django.utils import timezone

from containers.requests.services import container_create_by_template
from outbox import relay
from outbox.models import FairnessMark, OutboxEvent
from tests.factories import TemplateFactory, UserFactory
from tests.processes import running_app, wait_for

KIND = "ContainerCreateRequest"


def _row(key: str, aggregate: str, **fields) -> OutboxEvent:
    return OutboxEvent.objects.create(
        kind=KIND,
        queue="create",
        aggregate_id=aggregate,
        fairness_key=key,
        available_at=timezone.now() - timezone.timedelta(seconds=1),
        **fields,
    )


def _claim_keys(count: int, batch: int = 1) -> list[str]:
    """Claim ``count`` times (``batch`` rows each), finishing each claim at once."""
    served = []
    for _ in range(count):
        claimed = relay.claim("create", batch)
        ids = [row_id for row_id, _ in claimed]
        served += [
            OutboxEvent.objects.get(id=row_id).fairness_key for row_id in ids
        ]  # in claim order
        OutboxEvent.objects.filter(id__in=ids).update(status="sent")
    return served


@pytest.mark.django_db
def test_a_late_owner_is_served_before_the_backlog_of_another(postgres):
    for i in range(30):
        _row("alice", f"a{i}")
    _row("bob", "b0")
    served = _claim_keys(4)
    assert "bob" in served[:2], served
    assert served.count("alice") == 3, served


@pytest.mark.django_db
def test_keys_take_turns_least_recently_served_first(postgres):
    for key in ("a", "b", "c"):
        for i in range(4):
            _row(key, f"{key}{i}")
    served = _claim_keys(9)
    assert served == ["a", "b", "c"] * 3, served
    marks = dict(FairnessMark.objects.values_list("key", "turn"))
    assert marks["c"] > marks["b"] > marks["a"], marks


@pytest.mark.django_db
def test_a_key_that_already_holds_the_last_turn_is_not_rewritten(postgres):
    """One owner draining a backlog alone: its mark is written once, not once per claim;
    a key served in between still moves it behind, and the order stays round-robin."""
    for i in range(3):
        _row("a", f"a{i}")
    assert _claim_keys(1) == ["a"]
    written = FairnessMark.objects.get(key="a")
    assert _claim_keys(2) == ["a", "a"]
    again = FairnessMark.objects.get(key="a")
    assert (again.turn, again.served_at) == (written.turn, written.served_at), (written, again)
    for key in ("a", "b"):
        for i in range(2):
            _row(key, f"{key}-late{i}")
    served = _claim_keys(4)
    assert served == ["b", "a", "b", "a"], served
    marks = dict(FairnessMark.objects.values_list("key", "turn"))
    assert marks["a"] > marks["b"] > written.turn, marks


@pytest.mark.django_db
def test_one_batch_interleaves_the_keys(postgres, gobrave_config):
    gobrave_config(outbox={"prefetch": 10})  # room for the whole batch
    for i in range(5):
        _row("a", f"a{i}")
    for i in range(2):
        _row("b", f"b{i}")
    claimed = relay.claim("create", 6)
    keys = [OutboxEvent.objects.get(id=row_id).fairness_key for row_id, _ in claimed]
    assert keys[:4] in (["a", "b", "a", "b"], ["b", "a", "b", "a"]), keys
    assert sorted(keys) == ["a", "a", "a", "a", "b", "b"], keys


@pytest.mark.django_db
def test_one_batch_serves_every_key_once_before_any_key_twice(postgres, gobrave_config):
    """With more keys than a share of the room, the batch still takes every key's oldest
    row first (a key never waits behind two rows of another in one claim)."""
    gobrave_config(outbox={"prefetch": 10})
    for key in ("a", "b", "c"):
        for i in range(4):
            _row(key, f"{key}{i}")
    claimed = relay.claim("create", 4)
    keys = [OutboxEvent.objects.get(id=row_id).fairness_key for row_id, _ in claimed]
    assert keys == ["a", "b", "c", "a"], keys


@pytest.mark.django_db
def test_fairness_never_breaks_the_order_of_one_instance(postgres):
    first = _row("bob", "x", status="processing", lease_expires_at=timezone.now())
    first.lease_expires_at = timezone.now() + timezone.timedelta(hours=1)
    first.save(update_fields=["lease_expires_at"])
    _row("bob", "x")  # waits for the row before it
    _row("alice", "y")
    claimed = relay.claim("create", 5)
    assert [OutboxEvent.objects.get(id=i).aggregate_id for i, _ in claimed] == ["y"]


# --- with the real dispatcher and cluster ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_with_one_slot_a_single_create_of_bob_starts_among_the_first_two(
    postgres, tmp_path, fake_runtime, gobrave_config
):
    gobrave_config(container={"create_queue_max_pending": 100, "create_queue_max_concurrency": 1})
    template = TemplateFactory(name="sleeper")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    with running_app(
        tmp_path,
        container_create_queue_max_concurrency=1,
        outbox_poll_interval="0.2",
        queue_poll="0.05",
    ) as app:
        for _ in range(30):
            container_create_by_template(template=template, owner=alice, actor="test")
        late = container_create_by_template(template=template, owner=bob, actor="test")
        app.dispatcher()
        app.cluster("create")

        def started() -> list[OutboxEvent]:
            rows = OutboxEvent.objects.filter(kind=KIND, started_at__isnull=False)
            return list(rows.order_by("started_at", "id")) if rows.count() >= 3 else []

        first = wait_for(started, timeout=120, message="three creates started")
        order = [row.aggregate_id for row in first]
        assert str(late.pk) in order[:2], "\n".join(
            f"#{row.id} {row.fairness_key} {row.status} started={row.started_at}" for row in first
        )
