"""gobrave's django-q2 broker on PostgreSQL: the claim is the hand-off, NOTIFY wakes it.

The broker reads on its own connection, so every test here commits for real.
"""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest
from django.db import connection, transaction
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from django_q.tasks import async_task

from outbox import broker as broker_module
from outbox import conf, listen, registry, relay
from outbox.broker import OutboxBroker, handoff
from outbox.dispatcher import Dispatcher, default_sender
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.services import (
    outbox_enqueue,
    outbox_enqueue_once,
    outbox_release_deferred,
    outbox_retry_now,
)
from tests.outbox.conftest import enqueue_row, kind_registered
from tests.processes import outbox_rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]
KIND = "TestBroker"


@pytest.fixture(autouse=True)
def probe_queue(postgres, gobrave_config, monkeypatch):
    monkeypatch.setattr(broker_module, "WAIT", 0.2)  # an idle read returns quickly here
    with kind_registered(KIND, queue="probe", workers=2):
        yield


@pytest.fixture
def broker():
    made = OutboxBroker("probe")
    yield made
    made._close()


enqueue = partial(enqueue_row, KIND)


def tasks(found) -> list[dict]:
    return [SignedPackage.loads(payload) for _, payload in found or []]


def claim_and_hand_off(limit: int = 16) -> list[tuple[int, str]]:
    with transaction.atomic():
        claimed = relay.claim("probe", limit)
        for event_id, token in claimed:
            handoff("probe", event_id, str(token))
    return [(event_id, str(token)) for event_id, token in claimed]


def test_the_shipped_postgres_config_uses_it_and_the_dispatcher_hands_off_by_notify():
    from django.conf import settings

    assert settings.Q_CLUSTER["broker_class"] == "outbox.broker.OutboxBroker"
    assert settings.Q_CLUSTER["ALT_CLUSTERS"]["control"]["broker_class"] == (
        "outbox.broker.OutboxBroker"
    )
    assert default_sender() is handoff


def test_a_committed_claim_is_handed_to_its_queue_once_as_the_execute_task(broker):
    first, second = enqueue("a"), enqueue("b")
    Dispatcher().cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    found = tasks(broker.dequeue())
    assert [(t["func"], t["args"]) for t in found] == [
        ("outbox.tasks.execute", (first.id, str(first.claim_token))),
        ("outbox.tasks.execute", (second.id, str(second.claim_token))),
    ], OutboxEvent.objects.values("id", "status", "claim_token", "started_at")
    assert all(t["save"] is False and t["ack_failure"] is True for t in found)
    assert broker.dequeue() is None  # the same claims are never pushed twice
    assert OutboxBroker("other").dequeue() is None  # nor to another queue's cluster
    assert not OrmQ.objects.exists()  # nothing was copied into django-q2's table


def test_a_claim_that_rolls_back_hands_nothing_off(broker):
    row = enqueue()

    def broken_send(queue, event_id, token):
        handoff(queue, event_id, token)
        raise ConnectionError("hand-off broke after the NOTIFY")

    with pytest.raises(ConnectionError):
        Dispatcher(send=broken_send).cycle()
    row.refresh_from_db()
    assert (row.status, row.claim_token) == ("pending", None), row.__dict__
    # Still due: the pusher claims it itself, under a token of its own.
    [task] = tasks(broker.dequeue())
    row.refresh_from_db()
    assert (row.status, task["args"]) == ("processing", (row.id, str(row.claim_token)))


def test_the_pusher_claims_due_rows_itself_within_the_in_flight_limit(broker, gobrave_config):
    gobrave_config(outbox={"prefetch": 0})
    rows = [enqueue(f"i{n}") for n in range(3)]
    found = tasks(broker.dequeue())  # probe has 2 workers, prefetch 0: 2 in flight
    claimed = list(OutboxEvent.objects.filter(status="processing").order_by("id"))
    assert [t["args"] for t in found] == [(r.id, str(r.claim_token)) for r in claimed]
    assert [r.id for r in claimed] == [rows[0].id, rows[1].id], claimed
    assert broker.dequeue() is None  # no room until one finishes
    assert relay.execute(*found[0]["args"]) == "sent"
    [third] = tasks(broker.dequeue())
    assert third["args"][0] == rows[2].id


def test_the_pusher_hands_out_its_claim_in_round_robin_order_not_by_id(broker, gobrave_config):
    """With room for the whole backlog (prefetch), the workers still start the rows in
    fair-share order: the late owner's row goes second, not last."""
    gobrave_config(outbox={"prefetch": 4})
    with transaction.atomic():
        early = [
            outbox_enqueue(kind=KIND, aggregate_id=f"a{n}", payload={}, fairness_key="alice")
            for n in range(3)
        ]
        late = outbox_enqueue(kind=KIND, aggregate_id="b", payload={}, fairness_key="bob")
    order = [t["args"][0] for t in tasks(broker.dequeue())]
    assert order in (
        [early[0].id, late.id, early[1].id, early[2].id],
        [late.id, early[0].id, early[1].id, early[2].id],
    ), (order, outbox_rows())


def test_a_started_claim_is_not_handed_out_but_its_reclaim_is(broker):
    row = enqueue()
    [(event_id, token)] = claim_and_hand_off()
    assert tasks(broker.dequeue())[0]["args"] == (event_id, token)
    # Another cluster of the same queue sees the claim too; begin() lets one run it.
    other = OutboxBroker("probe")
    try:
        assert tasks(other.dequeue())[0]["args"] == (event_id, token)
        assert relay.begin(event_id, token) is not None
        assert relay.begin(event_id, token) is None  # the second delivery does nothing
        assert other.dequeue() is None  # started: handed to nobody any more
    finally:
        other._close()
    # The worker died and its lease ran out: the reclaim is a new claim, handed again.
    OutboxEvent.objects.filter(id=row.id).update(lease_expires_at=row.created_at)
    [(again, new_token)] = claim_and_hand_off()
    assert (again, new_token != token) == (row.id, True)
    assert tasks(broker.dequeue())[0]["args"] == (row.id, new_token)
    row.refresh_from_db()
    assert row.attempts == 1, (row.status, row.attempts, row.last_error)


def test_a_claim_whose_lease_ran_out_unstarted_is_claimed_again_without_an_attempt(broker):
    row = enqueue()
    [(_, token)] = claim_and_hand_off()
    OutboxEvent.objects.filter(id=row.id).update(lease_expires_at=row.created_at)
    [task] = tasks(broker.dequeue())
    row.refresh_from_db()
    assert task["args"] == (row.id, str(row.claim_token)) and str(row.claim_token) != token
    assert row.attempts == 0, (row.status, row.attempts, row.last_error)  # it never ran


def test_the_pusher_wakes_on_a_commit_long_before_its_safety_net(broker, monkeypatch):
    monkeypatch.setattr(broker_module, "WAIT", 30)
    assert broker.dequeue() is None  # connected and listening; nothing due yet
    got: list = []
    reader = threading.Thread(target=lambda: (got.append(broker.dequeue()), connection.close()))
    reader.start()
    time.sleep(0.3)  # the reader is blocked on LISTEN now
    began = time.monotonic()
    row = enqueue()
    reader.join(15)
    assert not reader.is_alive(), "no wake-up within 15 s with a 30 s safety net"
    assert time.monotonic() - began < 10
    row.refresh_from_db()
    assert tasks(got[0])[0]["args"] == (row.id, str(row.claim_token))


def test_the_pusher_sleeps_through_a_commit_for_another_queue(broker, monkeypatch):
    """A row of another queue wakes that queue's pushers only: a read here would take the
    claimers' lock for nothing. Its own queue's row still wakes it at once."""
    monkeypatch.setattr(broker_module, "WAIT", 30)
    claims: list[str] = []
    real_claim = relay.claim
    monkeypatch.setattr(
        relay, "claim", lambda queue, limit: (claims.append(queue), real_claim(queue, limit))[1]
    )
    with kind_registered("TestBroker2", queue="probe2", workers=2):
        assert broker.dequeue() is None  # connected and listening; nothing due yet
        claims.clear()
        got: list = []
        reader = threading.Thread(target=lambda: (got.append(broker.dequeue()), connection.close()))
        reader.start()
        time.sleep(0.3)  # the reader is blocked on LISTEN now
        with transaction.atomic():
            other = outbox_enqueue(kind="TestBroker2", aggregate_id="b", payload={})
        time.sleep(0.5)  # time for a wrong wake-up to show (a right one never comes)
        assert reader.is_alive() and claims == [], (claims, outbox_rows())
        row = enqueue()
        reader.join(15)
        assert not reader.is_alive(), "no wake-up within 15 s for its own queue's row"
        assert claims == ["probe"], claims
        row.refresh_from_db()
        other.refresh_from_db()
        assert tasks(got[0])[0]["args"] == (row.id, str(row.claim_token)), outbox_rows()
        assert other.status == "pending", outbox_rows()


def test_every_wake_up_for_a_row_names_the_row_s_queue():
    """Each sender of ``gobrave_outbox`` for rows of one queue names it: what ``_wait``
    lets through to that queue's pushers only. One transaction each (PostgreSQL folds
    identical notifications of one transaction), so each is heard on its own."""
    with listen.connect("gobrave-test-notify-payloads") as conn:
        conn.execute(f"LISTEN {conf.NOTIFY_CHANNEL}")
        row = enqueue()  # outbox_enqueue
        with transaction.atomic():
            outbox_enqueue_once(kind=KIND, aggregate_id="a", payload={})  # wakes ``row``
        outbox_retry_now(event_id=row.id)
        with transaction.atomic():
            outbox_release_deferred(queue="probe")
        claim_and_hand_off()  # the claim says nothing here (its hand-off has a channel of its own)
        assert relay.claims_release_unstarted("probe") == 1, outbox_rows()
        heard = [note.payload for note in conn.notifies(timeout=10, stop_after=5)]
    assert heard == ["probe"] * 5, heard
    assert OutboxEvent.objects.count() == 1, outbox_rows()  # enqueue_once wrote no second row


def test_the_dispatcher_leaves_notify_to_the_pushers_and_polls():
    assert Dispatcher()._listener() is None
    other = Dispatcher(send=lambda *args: None)  # any other sender: it LISTENs itself
    try:
        assert other._listener() is not None
    finally:
        other._close_listener()


def test_other_tasks_go_through_ormq_in_the_callers_transaction_and_run_once(broker):
    with transaction.atomic():
        async_task("math.floor", 2.5, cluster="probe", save=False)
        transaction.set_rollback(True)
    assert broker.dequeue() is None and not OrmQ.objects.exists()
    with transaction.atomic():
        async_task("math.floor", 3.5, cluster="probe", save=False)
    [task] = tasks(broker.dequeue())
    assert (task["func"], task["args"]) == ("math.floor", (3.5,))
    assert not OrmQ.objects.exists()  # taken as it was read: never handed out twice
    assert broker.dequeue() is None


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_a_claim_commits_without_a_wal_flush_but_a_taken_task_waits_for_it(broker):
    """The claim's transaction is asynchronous (a lost claim only rolls its rows back);
    one that also took a task out of OrmQ is made synchronous again (at most once)."""

    # The session's own setting, as a request's connection has it (an earlier test in
    # this process may have run a worker's code on this connection: ``worker_session``
    # turns it off for the session); given back at the end.
    kept = _synchronous_commit()
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = on")
    try:
        _claims_and_dequeues(broker)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('synchronous_commit', %s, false)", [kept])


def _claims_and_dequeues(broker) -> None:
    enqueue()
    with transaction.atomic():  # seen from inside the claim's transaction
        assert relay.claim("probe", 16)
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"  # LOCAL: the session keeps its own setting
    from django.test.utils import CaptureQueriesContext

    def dequeue_sql() -> list[str]:
        with CaptureQueriesContext(connection) as seen:
            assert tasks(broker.dequeue())
        return [q["sql"] for q in seen.captured_queries]

    enqueue("b")
    assert "SET LOCAL synchronous_commit = on" not in dequeue_sql()  # a claim only
    async_task("math.floor", 1.5, cluster="probe", save=False)
    assert "SET LOCAL synchronous_commit = on" in dequeue_sql()


def test_a_worker_task_commits_without_a_wal_flush_set_once_per_connection():
    """django-q2's entry point (``outbox.tasks.execute``) sets its connection's commits
    asynchronous before the relay begins the row: the handler runs under it; the next
    task on the same connection sends no second SET. The test's connection is put back."""
    from django.test.utils import CaptureQueriesContext

    from outbox import tasks as outbox_tasks

    seen: list[str] = []
    registry.register(KIND, queue="probe", handler=lambda event: seen.append(
        _synchronous_commit()) or Outcome.SENT)  # fmt: skip
    assert _synchronous_commit() == "on"
    try:
        first, second = enqueue("a"), enqueue("b")
        claimed = dict(relay.claim("probe", 16))
        assert outbox_tasks.execute(first.id, str(claimed[first.id])) == Outcome.SENT
        with CaptureQueriesContext(connection) as queries:
            assert outbox_tasks.execute(second.id, str(claimed[second.id])) == Outcome.SENT
        sql = [q["sql"] for q in queries.captured_queries]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET synchronous_commit = DEFAULT")
        conf._worker_connections.discard(connection.connection)
    rows = OutboxEvent.objects.order_by("id")
    assert seen == ["off", "off"], outbox_rows()
    assert [row.status for row in rows] == ["sent", "sent"], outbox_rows()
    assert not [q for q in sql if q.startswith("SET synchronous_commit")], sql
    assert _synchronous_commit() == "on"


def test_the_pusher_checks_its_connection_once_a_second_not_per_read(broker, monkeypatch):
    """``close_old_connections`` (which gives a pooled connection back) runs on the first
    read and then at most every ``CONNECTION_CHECK_EVERY``, not on every wake-up."""
    checks: list[int] = []
    monkeypatch.setattr(broker_module, "close_old_connections", lambda: checks.append(1))
    enqueue()
    assert tasks(broker.dequeue()), outbox_rows()
    for _ in range(2):
        broker.dequeue()  # a wake-up (or the wait's end) finds nothing new
    assert len(checks) == 1
    monkeypatch.setattr(broker_module, "CONNECTION_CHECK_EVERY", 0.0)
    broker._fresh_until = 0.0
    for _ in range(2):
        broker.dequeue()
    assert len(checks) == 3


def test_the_pusher_beats_before_it_waits_not_between_its_claim_and_the_hand_off(
    broker, monkeypatch
):
    """The liveness mark is written at the start of a read (before the LISTEN wait), so a
    claim's tasks go to django-q2 without waiting for it."""
    from outbox import liveness

    steps: list[str] = []
    claim = relay.claim
    monkeypatch.setattr(liveness, "process_beat", lambda **kw: steps.append("beat"))
    monkeypatch.setattr(relay, "claim", lambda *a: steps.append("claim") or claim(*a))
    enqueue()
    assert tasks(broker.dequeue()), outbox_rows()
    assert steps == ["beat", "claim"]


def test_the_broker_reconnects_after_its_connection_is_cut(broker):
    broker.dequeue()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'gobrave-broker-probe' AND datname = current_database()"
        )
    assert broker.dequeue() is None  # the cut is noticed, logged, and slept off
    enqueue()
    [(event_id, token)] = claim_and_hand_off()
    assert tasks(broker.dequeue())[0]["args"] == (event_id, token)
