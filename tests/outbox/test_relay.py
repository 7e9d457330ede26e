"""The relay's row semantics (contract §3), driven in-process with a test handler."""

from __future__ import annotations

import datetime as dt
import uuid
from functools import partial

import pytest
from django.db import connection, transaction
from django.db.models import DateTimeField, Func
from django.db.models.functions import Now
from django.utils import timezone

from core.counters import counters_since
from outbox import conf, registry, relay, selectors
from outbox.errors import NotRetriable
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import Defer, PermanentFailure, RetryLater
from outbox.services import outbox_park, outbox_release_deferred, outbox_retry_now
from tests.outbox.conftest import enqueue_row, kind_registered

pytestmark = pytest.mark.django_db


class ClockTimestamp(Func):
    """PostgreSQL's clock now, whatever the transaction's or the statement's start."""

    template = "CLOCK_TIMESTAMP()"
    output_field = DateTimeField()


KIND = "TestProbe"
calls: list[int] = []
behaviour: dict[str, object] = {}
dead: list[tuple[int, str]] = []
retries: list[tuple[int, registry.Retry]] = []


def probe(event):
    calls.append(event.id)
    action = behaviour.get(event.aggregate_id, "ok")
    if callable(action):
        action(event)
        action = "ok"
    if action == "defer":
        raise Defer("full")
    if action == "boom":
        raise ValueError("boom from the handler")
    if action == "permanent":
        raise PermanentFailure("cannot ever work")
    if action == "later":
        raise RetryLater("busy", retry_after=120)
    if action == "unreachable":
        raise RetryLater("registry unreachable")
    return Outcome.SUPERSEDED if action == "superseded" else Outcome.SENT


def died(event, reason: str) -> None:
    dead.append((event.id, reason))


def retried(event, retry: registry.Retry) -> None:
    retries.append((event.id, retry))


@pytest.fixture(autouse=True)
def probe_kind(gobrave_config):
    with kind_registered(
        KIND, queue="probe", workers=4, handler=probe, on_dead=died, on_retry=retried
    ):
        calls.clear()
        behaviour.clear()
        dead.clear()
        retries.clear()
        # Rows in flight = the workers (prefetch 0): the tests count them exactly;
        # test_prefetch_adds_to_in_flight_and_lengthens_the_claim_lease covers prefetch.
        gobrave_config(
            outbox={"backoff_base": 1, "backoff_cap": 600, "max_attempts": 3, "prefetch": 0}
        )
        yield


enqueue = partial(enqueue_row, KIND)


def _database_now() -> dt.datetime:
    """The database's clock as ``Now()`` reads it (PostgreSQL: the statement's start;
    SQLite reads the host's)."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def run_once(limit: int = 16) -> list[str]:
    return [relay.execute(event_id, token) for event_id, token in relay.claim("probe", limit)]


def test_success_marks_the_row_sent():
    row = enqueue()
    assert run_once() == ["sent"]
    row.refresh_from_db()
    assert (row.status, row.outcome, row.attempts) == ("sent", "sent", 0)
    assert row.sent_at is not None and row.started_at is not None


def test_rows_of_one_aggregate_run_one_at_a_time_in_order():
    first, second = enqueue("a"), enqueue("a")
    other = enqueue("b")
    claimed = [event_id for event_id, _ in relay.claim("probe", 16)]
    assert claimed == [first.id, other.id]  # second waits behind first
    assert relay.claim("probe", 16) == []
    for event_id, token in [(first.id, OutboxEvent.objects.get(id=first.id).claim_token)]:
        relay.execute(event_id, token)
    assert [event_id for event_id, _ in relay.claim("probe", 16)] == [second.id]


def test_in_flight_is_bounded_by_the_queue_workers():
    for index in range(10):
        enqueue(f"agg{index}")
    assert len(relay.claim("probe", 16)) == 4
    assert relay.claim("probe", 16) == []
    assert OutboxEvent.objects.filter(status="processing").count() == 4


def test_max_in_flight_caps_further(gobrave_config):
    gobrave_config(outbox={"max_in_flight": 2})
    for index in range(5):
        enqueue(f"agg{index}")
    assert len(relay.claim("probe", 16)) == 2


def test_a_duplicate_delivery_of_one_claim_executes_once():
    enqueue()
    [(event_id, token)] = relay.claim("probe", 16)
    assert relay.execute(event_id, token) == "sent"
    assert relay.execute(event_id, token) == "duplicate"
    assert calls == [event_id]


def test_a_stale_worker_changes_nothing():
    row = enqueue()
    [(event_id, token)] = relay.claim("probe", 16)
    # The lease ran out and another dispatcher took the row over.
    OutboxEvent.objects.filter(id=event_id).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    [(_, new_token)] = relay.claim("probe", 16)
    assert new_token != token
    assert relay.execute(event_id, token) == "duplicate"
    row.refresh_from_db()
    assert (row.status, row.claim_token) == ("processing", new_token)
    assert relay._finish(event_id, token, "sent") is False


def test_expired_lease_is_due_again_and_counts_an_attempt_if_it_had_started():
    row = enqueue()
    [(event_id, token)] = relay.claim("probe", 16)
    assert relay.begin(event_id, token)
    OutboxEvent.objects.filter(id=event_id).update(
        lease_expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert run_once() == ["sent"]
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sent", 1)
    assert (row.reclaims, row.last_error) == (0, "lease expired while the handler ran"), row


def test_a_claim_that_ran_out_before_any_worker_began_it_counts_a_reclaim():
    """Handed to a cluster that took no tasks: counted and said on the row, no attempt."""
    row = enqueue()
    relay.claim("probe", 16)
    OutboxEvent.objects.filter(id=row.id).update(lease_expires_at=Now() - dt.timedelta(seconds=1))
    assert run_once() == ["sent"]
    row.refresh_from_db()
    assert (row.status, row.attempts, row.reclaims) == ("sent", 0, 1), row.last_error
    assert "claimed 1 times and never begun by a worker" in row.last_error
    assert counters_since(timezone.now() - dt.timedelta(hours=1))["reclaimed_unstarted"] == 1


@pytest.fixture
def guard():
    """A claim guard on the probe queue that holds back the aggregates in ``held``."""
    seen: list[list[tuple[int, str]]] = []
    held: set[str] = set()

    def allow(rows):
        seen.append(list(rows))
        assert transaction.get_connection().in_atomic_block  # inside the claim
        return [row_id for row_id, aggregate in rows if aggregate not in held]

    registry.register_claim_guard("probe", allow)
    yield held, seen
    registry._claim_guards.pop("probe", None)


def test_a_claim_guard_holds_rows_back_as_they_were_until_it_lets_them_go(guard):
    """contract §3: rows the queue's guard holds back are not claimed and stay as they
    were (no attempt, no reclaim, no turn), still due; those behind them stay behind."""
    held, seen = guard
    crashed, waiting, behind, free = enqueue("x"), enqueue("y"), enqueue("y"), enqueue("z")
    [(event_id, token)] = relay.claim("probe", 1)
    assert event_id == crashed.id and relay.begin(event_id, token)
    expired = timezone.now() - dt.timedelta(seconds=1)
    OutboxEvent.objects.filter(id=crashed.id).update(lease_expires_at=expired)
    held |= {"x", "y"}
    before = {row.id: row for row in OutboxEvent.objects.filter(id__in=[crashed.id, waiting.id])}
    seen.clear()
    assert [event_id for event_id, _ in relay.claim("probe", 16)] == [free.id]
    assert seen == [[(crashed.id, "x"), (waiting.id, "y"), (free.id, "z")]]  # not ``behind``
    for row in OutboxEvent.objects.filter(id__in=before):
        was = before[row.id]
        fields = ("status", "attempts", "reclaims", "claim_token", "lease_expires_at", "started_at")
        assert [getattr(row, f) for f in fields] == [getattr(was, f) for f in fields], row
    assert OutboxEvent.objects.get(id=behind.id).status == "pending"
    assert relay.claim("probe", 16) == []  # still held: nothing else is claimed for them
    held.clear()
    claimed = [event_id for event_id, _ in relay.claim("probe", 16)]
    assert claimed == [crashed.id, waiting.id]  # the expired one first, then the pending
    crashed.refresh_from_db()
    assert (crashed.status, crashed.attempts) == ("processing", 1), crashed.last_error
    assert OutboxEvent.objects.get(id=behind.id).status == "pending"  # still behind its elder


def test_releasing_unstarted_claims_makes_them_due_at_once_and_spares_begun_ones():
    waiting, begun = enqueue("a"), enqueue("b")
    claims = dict(relay.claim("probe", 16))
    assert relay.begin(begun.id, claims[begun.id])
    assert relay.claims_release_unstarted("probe") == 1
    assert not relay.begin(waiting.id, claims[waiting.id])  # a late delivery is refused
    assert [event_id for event_id, _ in relay.claim("probe", 16)] == [waiting.id]
    assert OutboxEvent.objects.get(id=begun.id).claim_token == claims[begun.id]


def test_a_queue_whose_claims_no_worker_begins_is_stalled():
    row = enqueue("a")
    [(event_id, token)] = relay.claim("probe", 16)
    assert selectors.handoff_stalled(queue="probe", seconds=5) == 0  # just claimed
    OutboxEvent.objects.filter(id=row.id).update(
        lease_expires_at=Now() + conf.claim_lease("probe") - dt.timedelta(seconds=10)
    )
    assert selectors.handoff_stalled(queue="probe", seconds=5) == 1
    # A worker that is running something is busy, not wedged.
    other = enqueue("b")
    [(other_id, other_token)] = relay.claim("probe", 16)
    assert relay.begin(other_id, other_token)
    assert selectors.handoff_stalled(queue="probe", seconds=5) == 0
    assert other.id == other_id and event_id == row.id and token


def test_deferred_row_goes_back_to_pending_without_an_attempt():
    behaviour["a"] = "defer"
    row = enqueue()
    assert run_once() == ["deferred"]
    row.refresh_from_db()
    assert (row.status, row.attempts, row.outcome) == ("pending", 0, "deferred")
    assert row.available_at > timezone.now()


def test_failure_retries_with_backoff_then_goes_dead(gobrave_config):
    behaviour["a"] = "boom"
    row = enqueue()
    before = _database_now()
    assert run_once() == ["retried"]
    after = _database_now()
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("pending", 1)
    assert "ValueError: boom from the handler" in row.last_error
    assert "Traceback" in row.last_error
    [(_, retry)] = retries  # the backoff drawn, as the retry hook was told it
    assert 1.0 <= retry.delay <= 1.5  # backoff_base * 2^0, spread by up to +50%
    written = row.available_at - dt.timedelta(seconds=retry.delay)
    assert before <= written <= after, (before, written, after)  # due that long after
    outbox_retry_now(event_id=row.id)
    assert run_once() == ["retried"]
    row.refresh_from_db()
    assert row.attempts == 2
    outbox_retry_now(event_id=row.id)
    assert run_once() == ["dead"]
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("dead", 3)
    assert dead == [(row.id, "gave up after 3 attempts: ValueError: boom from the handler")]


def test_a_retry_tells_the_kind_s_hook_its_schedule_and_the_reason_in_words():
    behaviour["a"] = "unreachable"
    row = enqueue()
    assert run_once() == ["retried"]
    row.refresh_from_db()
    [(row_id, retry)] = retries
    assert (row_id, retry.attempts, retry.max_attempts, retry.reason) == (
        row.id,
        row.attempts,
        3,
        "registry unreachable",
    ), retry
    assert 1.0 <= retry.delay <= 1.5, retry  # backoff_base * 2^0, spread by up to +50%
    assert "RetryLater" in row.last_error  # the traceback stays on the row
    assert dead == []


def test_an_unexpected_error_reaches_the_retry_hook_with_its_class_name():
    behaviour["a"] = "boom"
    enqueue()
    assert run_once() == ["retried"]
    assert [retry.reason for _, retry in retries] == ["ValueError: boom from the handler"]


def test_a_reasoned_failure_out_of_attempts_goes_dead_saying_so(gobrave_config):
    gobrave_config(outbox={"max_attempts": 1})
    behaviour["a"] = "unreachable"
    row = enqueue()
    assert run_once() == ["dead"]
    assert dead == [(row.id, "gave up after 1 attempt: registry unreachable")]
    assert retries == []


def test_backoff_grows_exponentially_and_is_capped(gobrave_config):
    gobrave_config(outbox={"backoff_base": 2, "backoff_cap": 10})
    for attempt, base in [(1, 2), (2, 4), (3, 8), (4, 10), (9, 10)]:
        samples = [relay.backoff(attempt) for _ in range(200)]
        assert min(samples) >= base and max(samples) <= base * 1.5
        assert max(samples) > base * 1.2  # it is spread, not fixed


def test_retry_after_is_a_floor_for_the_backoff():
    behaviour["a"] = "later"
    row = enqueue()
    run_once()
    row.refresh_from_db()
    assert (row.available_at - timezone.now()).total_seconds() > 110


def test_permanent_failure_goes_dead_at_once():
    behaviour["a"] = "permanent"
    row = enqueue()
    assert run_once() == ["dead"]
    row.refresh_from_db()
    assert (row.status, row.last_error) == ("dead", "cannot ever work")
    assert dead == [(row.id, "cannot ever work")]


def test_superseded_is_sent_and_noted():
    behaviour["a"] = "superseded"
    row = enqueue()
    assert run_once() == ["superseded"]
    row.refresh_from_db()
    assert (row.status, row.outcome) == ("sent", "superseded")


def test_retry_now_refuses_rows_that_are_not_pending():
    row = enqueue()
    run_once()
    with pytest.raises(NotRetriable, match="not pending"):
        outbox_retry_now(event_id=row.id)


def test_an_unknown_kind_goes_dead_with_a_reason():
    row = OutboxEvent.objects.create(
        kind="Nobody", queue="probe", aggregate_id="x", available_at=timezone.now()
    )
    assert run_once() == ["dead"]
    row.refresh_from_db()
    assert "no handler registered for Nobody" in row.last_error


def test_purge_removes_only_old_sent_rows():
    old, fresh, failed = enqueue("1"), enqueue("2"), enqueue("3")
    behaviour["3"] = "permanent"
    run_once()
    OutboxEvent.objects.filter(id__in=[old.id, failed.id]).update(
        sent_at=timezone.now() - dt.timedelta(days=8)
    )
    assert relay.purge_sent() == 1
    assert relay.purge_sent() == 0
    assert set(OutboxEvent.objects.values_list("id", flat=True)) == {fresh.id, failed.id}


def test_purge_goes_in_chunks_and_takes_every_old_row():
    rows = [enqueue(str(index)) for index in range(7)]
    while run_once():  # four in flight at a time
        pass
    OutboxEvent.objects.filter(id__in=[r.id for r in rows]).update(
        sent_at=timezone.now() - dt.timedelta(days=8)
    )
    assert relay.purge_sent(chunk=3) == 7
    assert not OutboxEvent.objects.exists()


def test_begin_refuses_an_unknown_token():
    enqueue()
    [(event_id, _)] = relay.claim("probe", 16)
    assert relay.begin(event_id, uuid.uuid4()) is None


def test_prefetch_adds_to_in_flight_and_lengthens_the_claim_lease(gobrave_config):
    gobrave_config(outbox={"prefetch": 2, "delivery_timeout": 10, "lease_margin": 5})
    for index in range(10):
        enqueue(f"agg{index}")
    before = timezone.now()
    claimed = relay.claim("probe", 16)
    assert len(claimed) == 6  # 4 workers + 2 prefetched
    row = OutboxEvent.objects.get(id=claimed[0][0])
    # Waiting behind ceil(2/4) = 1 other handler: 10 * (1 + 1) + 5 seconds.
    assert 24 <= (row.lease_expires_at - before).total_seconds() <= 26
    assert relay.begin(row.id, claimed[0][1])
    row.refresh_from_db()
    assert 14 <= (row.lease_expires_at - timezone.now()).total_seconds() <= 15


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("waiting", [True, False], ids=["a-row-waits", "nothing-waits"])
def test_finishing_a_row_wakes_the_dispatchers_only_when_a_row_waits(postgres, waiting):
    from outbox import listen

    listener = listen.connect("test-listener")
    try:
        listener.execute("LISTEN gobrave_outbox")
        enqueue("a")
        if waiting:
            enqueue("a")  # due, but behind the first row of its instance
        [(event_id, token)] = relay.claim("probe", 16)
        assert len(list(listener.notifies(timeout=0.3))) == (2 if waiting else 1)  # enqueues
        assert relay.execute(event_id, token) == "sent"
        heard = list(listener.notifies(timeout=1 if waiting else 0.3, stop_after=1))
        assert len(heard) == (1 if waiting else 0), heard
    finally:
        listener.close()


def test_leases_follow_the_database_clock_not_a_skewed_host_clock(monkeypatch):
    from django.db import connection

    enqueue()
    skewed = timezone.now() + dt.timedelta(hours=1)  # this host runs an hour ahead
    monkeypatch.setattr("django.utils.timezone.now", lambda: skewed)
    [(event_id, token)] = relay.claim("probe", 16)
    assert relay.begin(event_id, token)
    with connection.cursor() as cursor:
        cursor.execute("SELECT lease_expires_at - now() FROM outbox_outboxevent WHERE id = %s",
                       [event_id])  # fmt: skip
        left = cursor.fetchone()[0]
    left = left.total_seconds() if hasattr(left, "total_seconds") else None
    if left is not None:  # PostgreSQL answers an interval
        assert 0 < left <= conf.lease().total_seconds() + 1
    row = OutboxEvent.objects.get(id=event_id)
    assert row.lease_expires_at < skewed  # set from the database's clock, not the host's


# -- outcome writes that finish ------------------------------------------------------------


@pytest.fixture
def row_locker():
    """Hold a row lock on an outbox row from another connection until released."""
    import threading

    import psycopg
    from django.db import connection

    held, release, threads = threading.Event(), threading.Event(), []

    def hold(event_id: int) -> None:
        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(key, None)

        def run() -> None:
            with psycopg.connect(**params) as other:
                other.execute(
                    f"SELECT id FROM {OutboxEvent._meta.db_table} WHERE id = %s FOR UPDATE",
                    [event_id],
                )
                held.set()
                release.wait(30)

        thread = threading.Thread(target=run)
        thread.start()
        threads.append(thread)
        assert held.wait(10)

    yield hold, release
    release.set()
    for thread in threads:
        thread.join()


@pytest.mark.django_db(transaction=True)
def test_an_outcome_write_stuck_on_a_lock_is_cancelled_and_tried_again(
    postgres, row_locker, gobrave_config, monkeypatch
):
    """The first try waits on a row lock past write_timeout and is cancelled; the lock is
    gone by the second try, which records the outcome."""
    gobrave_config(outbox={"write_timeout": 0.3})
    hold, release = row_locker
    pauses = []
    monkeypatch.setattr(
        relay.writes, "_write_pause", lambda attempt: (pauses.append(attempt), release.set())
    )
    row = enqueue("locked")
    behaviour["locked"] = lambda event: hold(event.id)  # locked while the handler runs
    [(event_id, token)] = relay.claim("probe", 16)
    assert relay.execute(event_id, token) == "sent"
    assert pauses == [1]
    row.refresh_from_db()
    assert (row.status, row.outcome) == ("sent", "sent"), row.last_error


@pytest.mark.django_db(transaction=True)
def test_an_outcome_write_that_never_lands_leaves_the_row_to_its_lease(
    postgres, row_locker, gobrave_config, monkeypatch
):
    from django.db import connection

    gobrave_config(outbox={"write_timeout": 0.2})
    hold, _release = row_locker
    monkeypatch.setattr(relay.writes, "_write_pause", lambda attempt: None)
    row = enqueue("locked")
    behaviour["locked"] = lambda event: hold(event.id)
    [(event_id, token)] = relay.claim("probe", 16)
    assert relay.execute(event_id, token) == "stale"
    _release.set()
    row.refresh_from_db()
    assert (row.status, row.claim_token, row.outcome) == ("processing", token, ""), row.last_error
    # The timeout was the outcome transaction's own: nothing after it is limited.
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"


def test_a_queue_began_since_a_mark_only_once_a_worker_begins_a_row(postgres):
    mark = selectors.database_now()
    enqueue("a")
    [(event_id, token)] = relay.claim("probe", 16)
    assert not selectors.queue_began_since(queue="probe", since=mark)
    assert relay.begin(event_id, token)
    assert selectors.queue_began_since(queue="probe", since=mark)
    assert not selectors.queue_began_since(queue="probe", since=None)


@pytest.mark.django_db(transaction=True)
def test_one_heartbeat_thread_renews_every_running_claim_of_its_process(gobrave_config):
    """Two handlers running at once in one process (as a test thread pool would): both
    claims are renewed, by one thread, while their blocks run."""
    import threading

    from outbox.heartbeat import Heartbeat
    from tests.processes import outbox_rows, wait_for

    # A renewal every 2 s; a lease of 6 s leaves a loaded machine room to renew in time.
    gobrave_config(outbox={"liveness_timeout": 6})
    for name in ("a", "b"):
        enqueue(name)
    claimed = relay.claim("probe", 16)
    for event_id, token in claimed:
        assert relay.begin(event_id, token)
    begun = dict(OutboxEvent.objects.values_list("id", "lease_expires_at"))

    def beaters() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "outbox-heartbeat"]

    with Heartbeat(*claimed[0]), Heartbeat(*claimed[1]):

        def renewed() -> bool:
            leases = dict(OutboxEvent.objects.values_list("id", "lease_expires_at"))
            return all(leases[i] > begun[i] for i in begun)

        wait_for(renewed, timeout=30, message="both leases renewed", describe=outbox_rows)
        assert len(beaters()) == 1, beaters()  # one thread for both claims, not one each


def test_a_freed_slot_makes_only_the_queue_s_deferred_rows_due(postgres):
    """``outbox_release_deferred``: deferred rows of the queue waiting for a later poll are
    due now; a retry's backoff and other queues' rows keep their time."""
    later = timezone.now() + dt.timedelta(minutes=5)
    deferred, backoff, elsewhere = enqueue("a"), enqueue("b"), enqueue("c")
    OutboxEvent.objects.filter(pk=deferred.pk).update(available_at=later, outcome="deferred")
    OutboxEvent.objects.filter(pk=backoff.pk).update(available_at=later, outcome="retried")
    OutboxEvent.objects.filter(pk=elsewhere.pk).update(
        available_at=later, outcome="deferred", queue="other"
    )
    with transaction.atomic():
        assert outbox_release_deferred(queue="probe") == 1
    due = set(OutboxEvent.objects.filter(available_at__lte=Now()).values_list("pk", flat=True))
    assert due == {deferred.pk}, list(OutboxEvent.objects.values("pk", "outcome", "available_at"))


def test_a_claim_whose_lease_ran_out_after_its_transaction_began_is_parked(postgres):
    """``outbox_park`` judges a lease by its own statement's time (``Now()``, which Django
    compiles to ``STATEMENT_TIMESTAMP()`` on PostgreSQL), the clock the claim's pick used,
    not by its transaction's start: a lease that ran out after the transaction began (the
    pick saw it lapsed and the guard refused it) is parked; one still live is left."""
    lapsing, live = enqueue(), enqueue(aggregate="b")
    with transaction.atomic():  # the test's transaction began before either lease
        OutboxEvent.objects.filter(pk=lapsing.pk).update(
            status="processing", claim_token=uuid.uuid4(), lease_expires_at=ClockTimestamp()
        )
        OutboxEvent.objects.filter(pk=live.pk).update(
            status="processing",
            claim_token=uuid.uuid4(),
            lease_expires_at=Now() + dt.timedelta(hours=1),
        )
        assert outbox_park(ids=[lapsing.pk, live.pk], delay=60) == 1
    lapsing.refresh_from_db()
    live.refresh_from_db()
    parked = (lapsing.status, lapsing.outcome, lapsing.claim_token, lapsing.reclaims)
    assert parked == ("pending", "deferred", None, 1), vars(lapsing)
    assert (live.status, live.claim_token is not None) == ("processing", True), vars(live)
