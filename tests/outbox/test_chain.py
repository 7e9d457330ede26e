"""A worker's next row claimed in its outcome's transaction (``outbox.chain``), in-process
on PostgreSQL with a test handler: the claim keeps every rule of ``relay.claim`` and of
contract §3 and §4."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from functools import partial

import pytest
from django.db import connection, transaction
from django.utils import timezone

from outbox import chain, registry, relay, stopping
from outbox.models import OutboxEvent
from outbox.outcomes import Outcome
from outbox.registry import Defer
from outbox.services import outbox_enqueue
from tests.outbox.conftest import enqueue_row, kind_registered

pytestmark = [pytest.mark.django_db]
KIND = "TestChain"
QUEUE = "chained"
ran: list[tuple[int, str]] = []  # (row id, aggregate) in the order the handler ran them
behaviour: dict[str, object] = {}
in_flight: list[int] = []  # live processing rows of the queue, seen by each handler call
threads_seen: set[int] = set()


def handler(event):
    ran.append((event.id, event.aggregate_id))
    threads_seen.add(threading.get_ident())
    in_flight.append(
        OutboxEvent.objects.filter(
            queue=QUEUE, status="processing", lease_expires_at__gte=timezone.now()
        ).count()
    )
    action = behaviour.get(event.aggregate_id)
    if callable(action):
        action(event)
    if action == "defer":
        raise Defer("full")
    return Outcome.SENT


@pytest.fixture(autouse=True)
def chained_kind(postgres, gobrave_config):
    with kind_registered(KIND, queue=QUEUE, workers=2, handler=handler):
        gobrave_config(outbox={"prefetch": 0, "max_in_flight": None, "max_attempts": 3})
        ran.clear()
        behaviour.clear()
        in_flight.clear()
        threads_seen.clear()
        yield


enqueue = partial(enqueue_row, KIND)


def claim_one() -> tuple[int, uuid.UUID]:
    [(event_id, token)] = relay.claim(QUEUE, 1)
    return event_id, token


def shown(rows=None) -> str:
    rows = rows if rows is not None else OutboxEvent.objects.order_by("id")
    return "\n".join(
        f"#{r.id} {r.aggregate_id} {r.status} attempts={r.attempts} reclaims={r.reclaims} "
        f"token={r.claim_token} started={r.started_at} lease={r.lease_expires_at} "
        f"outcome={r.outcome} error={r.last_error[-200:]!r}"
        for r in rows
    )


def row(event: OutboxEvent) -> OutboxEvent:
    return OutboxEvent.objects.get(id=event.id)


UNCLAIMED = ("pending", 0, 0, None, None)


def claim_state(event: OutboxEvent) -> tuple:
    """What a claim changes on a row: compared with ``UNCLAIMED`` for one left alone (or
    put back as it was)."""
    r = row(event)
    return (r.status, r.attempts, r.reclaims, r.claim_token, r.started_at)


def test_a_worker_runs_every_due_row_after_its_own_one_commit_each():
    rows = [enqueue(f"i{n}") for n in range(5)]
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=60) == Outcome.SENT
    assert [row_id for row_id, _ in ran] == [r.id for r in rows], shown()
    done = list(OutboxEvent.objects.order_by("id"))
    assert all((r.status, r.outcome, r.attempts) == ("sent", "sent", 0) for r in done), shown()
    for earlier, later in zip(done, done[1:], strict=False):
        assert later.started_at >= earlier.sent_at, shown()  # claimed with the outcome


def test_rows_in_flight_never_pass_the_workers():
    """Two workers' worth of claims (prefetch 0): one held by another worker, one chaining;
    the chain only ever replaces its own row, so in flight stays 2 throughout."""
    other = enqueue("other")
    rows = [enqueue(f"i{n}") for n in range(4)]
    claims = dict(relay.claim(QUEUE, 16))
    assert set(claims) == {other.id, rows[0].id}, shown()
    assert relay.claim(QUEUE, 16) == []  # full
    assert chain.execute(rows[0].id, claims[rows[0].id], budget=60) == Outcome.SENT
    assert in_flight == [2, 2, 2, 2], shown()
    assert row(other).status == "processing", shown()  # not the chain's: left alone


def test_rows_of_one_aggregate_still_run_one_at_a_time_in_order():
    first, second, third = enqueue("a"), enqueue("a"), enqueue("a")
    event_id, token = claim_one()
    chain.execute(event_id, token, budget=60)
    assert [row_id for row_id, _ in ran] == [first.id, second.id, third.id], shown()
    first, second, third = row(first), row(second), row(third)
    assert second.started_at >= first.sent_at and third.started_at >= second.sent_at, shown()


def test_the_next_row_goes_to_the_key_served_least_recently():
    xs = [enqueue(f"x{n}", key="x") for n in range(3)]
    y = enqueue("y0", key="y")
    event_id, token = claim_one()  # x's first: x has had its turn
    assert event_id == xs[0].id
    chain.execute(event_id, token, budget=60)
    assert [row_id for row_id, _ in ran] == [xs[0].id, y.id, xs[1].id, xs[2].id], shown()


def test_a_row_the_claim_guard_holds_back_stays_as_it_was_and_the_chain_ends():
    held = {"held"}
    registry.register_claim_guard(
        QUEUE, lambda rows: [row_id for row_id, aggregate in rows if aggregate not in held]
    )
    first, waiting = enqueue("first"), enqueue("held")
    event_id, token = claim_one()
    chain.execute(event_id, token, budget=60)
    assert ran == [(first.id, "first")], shown()
    assert claim_state(waiting) == UNCLAIMED, shown()
    held.clear()
    assert [event_id for event_id, _ in relay.claim(QUEUE, 16)] == [waiting.id]


def test_capacity_denied_goes_back_pending_without_an_attempt_and_claims_nothing():
    full, behind = enqueue("full"), enqueue("behind")
    behaviour["full"] = "defer"
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=60) == Outcome.DEFERRED
    full = row(full)
    assert (full.status, full.attempts, full.outcome) == ("pending", 0, "deferred"), shown()
    assert claim_state(behind) == UNCLAIMED, shown()


def test_a_reclaimed_row_that_had_started_counts_its_attempt():
    crashed, first, fresh = enqueue("crashed"), enqueue("first"), enqueue("fresh")
    claims = dict(relay.claim(QUEUE, 2))
    assert relay.begin(crashed.id, claims[crashed.id])  # its worker began it, then died
    expired = timezone.now() - dt.timedelta(seconds=1)
    OutboxEvent.objects.filter(id=crashed.id).update(lease_expires_at=expired)
    chain.execute(first.id, claims[first.id], budget=60)
    assert [row_id for row_id, _ in ran] == [first.id, crashed.id, fresh.id], shown()
    crashed = row(crashed)
    assert (crashed.status, crashed.attempts) == ("sent", 1), shown()
    assert crashed.claim_token != claims[crashed.id], shown()


def test_a_claim_whose_lease_ran_out_records_its_outcome_but_claims_nothing():
    """Its row no longer counted as in flight: a claim in its place could pass the limit."""
    late, behind = enqueue("late"), enqueue("behind")

    def lease_runs_out(event):
        past = timezone.now() - dt.timedelta(seconds=1)
        OutboxEvent.objects.filter(id=event.id).update(lease_expires_at=past)

    behaviour["late"] = lease_runs_out
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=60) == Outcome.SENT
    assert (row(late).status, row(behind).status) == ("sent", "pending"), shown()
    assert row(behind).claim_token is None, shown()


def test_a_stale_worker_neither_records_nor_claims():
    lost, behind = enqueue("lost"), enqueue("behind")
    behaviour["lost"] = lambda event: OutboxEvent.objects.filter(id=event.id).update(
        claim_token=uuid.uuid4()
    )
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=60) == Outcome.STALE
    assert (row(lost).status, row(behind).status) == ("processing", "pending"), shown()


def _database_error(rows):
    with connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM outbox_outboxevent")
    return []


def _guard_bug(rows):
    raise RuntimeError("a guard's own bug")


@pytest.mark.parametrize("broken", [_database_error, _guard_bug], ids=["database", "other"])
def test_an_error_in_the_claim_rolls_it_back_and_the_outcome_is_recorded_alone(broken):
    """A database error or any other (a claim guard that raises): the claim rolls back,
    the outcome is still recorded (``chain.execute`` never raises)."""
    first, behind = enqueue("first"), enqueue("behind")
    event_id, token = claim_one()
    registry.register_claim_guard(QUEUE, broken)
    assert chain.execute(event_id, token, budget=60) == Outcome.SENT
    first = row(first)
    assert (first.status, first.outcome) == ("sent", "sent"), shown()
    assert claim_state(behind) == UNCLAIMED, shown()


def test_no_budget_runs_the_delivered_row_alone():
    first, behind = enqueue("first"), enqueue("behind")
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=0) == Outcome.SENT
    assert (row(first).status, row(behind).status) == ("sent", "pending"), shown()


def test_a_duplicate_delivery_runs_nothing():
    enqueue("first")
    event_id, token = claim_one()
    assert relay.begin(event_id, token)
    assert chain.execute(event_id, token, budget=60) == Outcome.DUPLICATE
    assert ran == [], shown()


@pytest.fixture
def sigterm(monkeypatch):
    """``stopping``'s SIGTERM flag, and its exit turned into SystemExit (in-process)."""

    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(stopping.os, "_exit", exit_)
    yield stopping._asked
    stopping._asked.clear()


def test_after_a_sigterm_the_outcome_is_recorded_and_nothing_claimed(sigterm):
    first, behind = enqueue("first"), enqueue("behind")
    behaviour["first"] = lambda event: sigterm.set()
    event_id, token = claim_one()
    with pytest.raises(SystemExit):
        chain.execute(event_id, token, budget=60)
    assert (row(first).status, row(behind).status) == ("sent", "pending"), shown()
    assert row(behind).claim_token is None, shown()


def test_a_row_claimed_just_before_a_sigterm_is_put_back_due_without_an_attempt(sigterm):
    first, behind = enqueue("first"), enqueue("behind")

    def sigterm_meanwhile(rows):  # asked in the claim's transaction: after the check
        sigterm.set()
        return [row_id for row_id, _ in rows]

    registry.register_claim_guard(QUEUE, sigterm_meanwhile)
    event_id, token = claim_one()
    with pytest.raises(SystemExit):
        chain.execute(event_id, token, budget=60)
    assert ran == [(first.id, "first")], shown()
    assert claim_state(behind) == UNCLAIMED, shown()
    assert row(behind).available_at <= timezone.now(), shown()


def test_the_budget_leaves_each_chained_row_its_whole_delivery_timeout(gobrave_config):
    from outbox import conf

    gobrave_config(outbox={"delivery_timeout": 300})
    assert conf.chain_budget(302) == pytest.approx(1.75)
    assert conf.chain_budget(300) == 0.0  # no room: no chaining
    assert conf.chain_budget(900) == conf.CHAIN_MAX
    assert conf.chain_budget(None) == conf.CHAIN_MAX  # no timeout at all


@pytest.mark.django_db(transaction=True)
def test_three_workers_chaining_at_once_run_each_row_once_in_order_within_the_limit(
    gobrave_config,
):
    """Real threads, each with its own connection, as three workers of a queue of three:
    each takes a claim and chains until nothing is due. Every row runs exactly once, the
    rows of one aggregate in order, and never more than three rows are in flight."""
    import threading

    from django.db import connections

    registry.register_queue(QUEUE, 3)
    rows = [enqueue(f"agg{n % 7}", key=f"k{n % 3}") for n in range(60)]
    errors: list[BaseException] = []

    all_claimed = threading.Barrier(3)

    def worker() -> None:
        try:
            claimed = relay.claim(QUEUE, 1)
            all_claimed.wait(60)  # the three chains run side by side from the start
            while claimed:
                [(event_id, token)] = claimed
                chain.execute(event_id, token, budget=60)
                claimed = relay.claim(QUEUE, 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert sorted(row_id for row_id, _ in ran) == [r.id for r in rows], shown()
    assert max(in_flight) <= 3, (in_flight, shown())
    assert len(threads_seen) == 3, threads_seen
    done = list(OutboxEvent.objects.order_by("id"))
    assert all((r.status, r.attempts, r.reclaims) == ("sent", 0, 0) for r in done), shown()
    by_aggregate: dict[str, list[OutboxEvent]] = {}
    for r in done:
        by_aggregate.setdefault(r.aggregate_id, []).append(r)
    for chained in by_aggregate.values():
        for earlier, later in zip(chained, chained[1:], strict=False):
            assert later.started_at >= earlier.sent_at, shown(chained)


def test_the_budget_is_checked_when_the_next_row_is_claimed_not_before_the_handler(monkeypatch):
    """A row begun inside the budget whose handler ran past it claims nothing: the next
    row would get less than its whole delivery_timeout before django-q2's timeout."""
    clock = [1000.0]
    monkeypatch.setattr(chain.time, "monotonic", lambda: clock[0])
    first, behind = enqueue("first"), enqueue("behind")

    def slow(event):
        clock[0] += 250.0  # the handler took 250 s (within its delivery_timeout)

    behaviour["first"] = slow
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=1.75) == Outcome.SENT
    first = row(first)
    assert (first.status, first.outcome) == ("sent", "sent"), shown()
    assert claim_state(behind) == UNCLAIMED, shown()


def test_no_worker_chains_where_max_in_flight_binds_below_the_queues_limits(gobrave_config):
    """A chain keeps its queue's row in flight: under a global cap below the queues' own
    limits that row would be kept from another queue, so each row runs alone."""
    gobrave_config(outbox={"prefetch": 0, "max_in_flight": 1, "max_attempts": 3})
    first, behind = enqueue("first"), enqueue("behind")
    assert chain.global_cap_binds()
    event_id, token = claim_one()
    assert chain.execute(event_id, token, budget=60) == Outcome.SENT
    assert (row(first).status, row(behind).status) == ("sent", "pending"), shown()


@pytest.mark.django_db(transaction=True)
def test_a_claim_counting_while_a_chain_swaps_its_row_waits_for_it(monkeypatch):
    """The chain's row out and row in are one step for every claimer: a ``relay.claim``
    that counts while a chain is between them (here the finished row's committed lease
    ran out, so it would read as room) waits for the chain's commit, and then finds no
    room. Limit 2: ``other`` and the chain's row live."""
    from django.db import connections

    # The chain's own lease check dropped, and its row's lease in the past: as if the
    # lease ran out while the chain's transaction was open.
    monkeypatch.setattr(chain, "_FINISH", chain._FINISH.split("  AND lease_expires_at")[0])
    other, first, behind, extra = enqueue("other"), enqueue("A"), enqueue("B"), enqueue("C")
    claims = dict(relay.claim(QUEUE, 2))
    assert set(claims) == {other.id, first.id}, shown()
    assert relay.begin(first.id, claims[first.id])
    past = timezone.now() - dt.timedelta(seconds=1)
    OutboxEvent.objects.filter(id=first.id).update(lease_expires_at=past)
    got: list = []

    def claimer() -> None:
        try:
            got.append(relay.claim(QUEUE, 16))
        finally:
            connections.close_all()

    waiting = threading.Thread(target=claimer)

    def start_claimer_inside(rows):  # in the chain's transaction, after its row out
        waiting.start()
        waits_for_lock = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        for _ in range(600):  # a condition, not a sleep: the claimer blocks on the lock
            with connection.cursor() as cursor:
                cursor.execute(waits_for_lock)
                if cursor.fetchone()[0]:
                    break
            waiting.join(0.05)
        else:
            raise AssertionError(f"the claimer never waited for the chain: {got}")
        return [row_id for row_id, _ in rows]

    registry.register_claim_guard(QUEUE, start_claimer_inside)
    link = chain.Link(QUEUE, "A", until=float("inf"))
    assert link.finish(first.id, claims[first.id], "sent", outcome="sent"), shown()
    waiting.join(60)
    live = OutboxEvent.objects.filter(
        queue=QUEUE, status="processing", lease_expires_at__gte=timezone.now()
    )
    assert got == [[]], (got, shown())
    assert sorted(live.values_list("id", flat=True)) == [other.id, behind.id], shown()
    assert row(extra).status == "pending", shown()


@pytest.mark.django_db(transaction=True)
def test_a_chaining_outcome_wakes_the_pushers_of_the_row_it_held_back_on_another_queue():
    """Order per instance: a stop on the control queue waits behind its instance's create.
    The create's outcome chains the next create, and still NOTIFYs, so the other queue's
    pusher takes the stop now, not at its next poll."""
    from outbox import conf, listen

    with kind_registered("TestChainOther", queue="other", workers=1):
        first = enqueue("I")
        with transaction.atomic():
            held = outbox_enqueue(kind="TestChainOther", aggregate_id="I", payload={})
        behind = enqueue("J")
        event_id, token = claim_one()
        assert event_id == first.id, shown()
        assert relay.claim("other", 1) == [], shown()  # behind its instance's create
        conn = listen.connect("test-chain-wake")
        try:
            conn.execute(f"LISTEN {conf.NOTIFY_CHANNEL}")
            assert relay.begin(event_id, token)
            link = chain.Link(QUEUE, "I", until=float("inf"))
            assert link.finish(event_id, token, "sent", outcome="sent"), shown()
            assert link.next and link.next[0].id == behind.id, shown()
            heard = list(conn.notifies(timeout=10, stop_after=1))
        finally:
            conn.close()
        assert heard, f"nobody woken for #{held.id}:\n{shown()}"
        assert [event_id for event_id, _ in relay.claim("other", 1)] == [held.id], shown()
