"""The dispatcher: --once, hand-off to django-q2, waking on NOTIFY; hooks; fork safety."""

from __future__ import annotations

import os
import threading
import time
from functools import partial
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django_q.signing import SignedPackage

from outbox import hooks, registry, relay
from outbox.broker import OutboxBroker
from outbox.dispatcher import Dispatcher
from outbox.models import OutboxEvent
from tests.outbox.conftest import enqueue_row, kind_registered
from tests.processes import wait_for

KIND = "TestDispatch"


def boom(event):
    raise RuntimeError("handler broke")


@pytest.fixture(autouse=True)
def dispatch_kind(gobrave_config):
    with kind_registered(KIND, queue="probe", workers=2):
        yield


enqueue = partial(enqueue_row, KIND)


# cycle() starts with close_old_connections(), as a long-running loop must: real commits.
@pytest.mark.django_db(transaction=True)
def test_once_claims_and_hands_off_to_django_q_in_one_transaction(postgres):
    row = enqueue()
    out = StringIO()
    call_command("run_dispatcher", "--once", stdout=out)
    assert "handed 1 outbox rows" in out.getvalue()
    row.refresh_from_db()
    assert row.status == "processing" and row.claim_token is not None
    broker = OutboxBroker("probe")  # the broker of the probe cluster (PostgreSQL)
    try:
        [(_, payload)] = broker.dequeue()
    finally:
        broker._close()
    assert SignedPackage.loads(payload)["args"] == (row.id, str(row.claim_token))


@pytest.mark.django_db(transaction=True)
def test_a_failed_hand_off_rolls_the_claim_back():
    row = enqueue()

    def broken_send(queue, event_id, token):
        raise ConnectionError("broker gone")

    with pytest.raises(ConnectionError):
        Dispatcher(send=broken_send).cycle()
    row.refresh_from_db()
    assert (row.status, row.claim_token) == ("pending", None)


def _asleep_signal(dispatcher: Dispatcher) -> threading.Event:
    """Set each time ``dispatcher`` goes to sleep in ``wait`` (its cycle done)."""
    asleep = threading.Event()
    real_wait = dispatcher.wait

    def wait(timeout: float) -> None:
        asleep.set()
        real_wait(timeout)

    dispatcher.wait = wait
    return asleep


@pytest.mark.django_db(transaction=True)
def test_the_dispatcher_wakes_on_notify_long_before_its_poll(postgres, gobrave_config):
    """Asleep with an hour's poll, the dispatcher hands a committed row off: only the
    NOTIFY can wake it."""
    gobrave_config(outbox={"poll_interval": 3600})
    handed = threading.Event()
    dispatcher = Dispatcher(send=lambda queue, event_id, token: handed.set())
    asleep = _asleep_signal(dispatcher)
    thread = threading.Thread(target=lambda: (dispatcher.run(), connection.close()))
    thread.start()
    try:
        assert asleep.wait(60), "the dispatcher never finished its first cycle"
        enqueue()
        assert handed.wait(60), "no hand-off with an hour's poll: the NOTIFY was not heard"
    finally:
        dispatcher.stop()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_a_row_committed_between_the_claim_and_the_sleep_wakes_the_dispatcher(
    postgres, gobrave_config
):
    """The dispatcher LISTENs before it claims: a row committed after its first claim
    and before it sleeps is heard (its NOTIFY waits on the socket), not left for the
    poll an hour away."""
    gobrave_config(outbox={"poll_interval": 3600})
    handed = threading.Event()
    dispatcher = Dispatcher(send=lambda queue, event_id, token: handed.set())
    real_cycle = dispatcher.cycle
    committed = []

    def cycle() -> int:
        claimed = real_cycle()
        if not committed:
            committed.append(enqueue())  # after the claim, before the wait
        return claimed

    dispatcher.cycle = cycle
    thread = threading.Thread(target=lambda: (dispatcher.run(), connection.close()))
    thread.start()
    try:
        assert handed.wait(60), f"row {committed} never handed off with an hour's poll"
    finally:
        dispatcher.stop()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_a_stop_wakes_a_dispatcher_asleep_on_listen_long_before_its_poll(postgres, gobrave_config):
    """``stop()`` (a SIGTERM's handler does the same) while the dispatcher sleeps on its
    LISTEN socket with a 30 s poll: it stops at once, not at the end of the poll."""
    gobrave_config(outbox={"poll_interval": 30})
    dispatcher = Dispatcher(send=lambda queue, event_id, token: None)
    thread = threading.Thread(target=lambda: (dispatcher.run(), connection.close()))
    thread.start()
    try:
        wait_for(lambda: dispatcher.listener is not None, timeout=30, message="listening")
    finally:
        dispatcher.stop()
        thread.join(10)
    assert not thread.is_alive(), "still asleep 10 s after stop() with a 30 s poll"


@pytest.mark.django_db
def test_hooks_hear_errors_retries_and_dead_letters_and_cannot_change_them(gobrave_config):
    gobrave_config(outbox={"max_attempts": 2})
    registry.register(KIND, queue="probe", handler=boom)
    heard: list[str] = []
    for name in ("error", "retry", "dead"):
        hooks.subscribe(name, lambda name=name, **details: heard.append(name))
    hooks.subscribe("retry", lambda **details: 1 / 0)  # a broken subscriber is skipped
    try:
        row = enqueue()
        [(event_id, token)] = relay.claim("probe", 16)
        assert relay.execute(event_id, token) == "retried"
        OutboxEvent.objects.filter(id=row.id).update(available_at=row.created_at)
        [(event_id, token)] = relay.claim("probe", 16)
        assert relay.execute(event_id, token) == "dead"
    finally:
        for name in ("error", "retry", "dead"):
            hooks._subscribers[name].clear()
    assert heard == ["error", "retry", "error", "dead"]


@pytest.mark.django_db
def test_a_forked_child_never_uses_its_parents_connection():
    OutboxEvent.objects.count()  # the parent holds an open connection
    parent = connection.connection
    assert parent is not None
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        os._exit(0 if connection.connection is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert connection.connection is parent and not parent.closed


@pytest.mark.django_db(transaction=True)
def test_a_cycle_folds_the_tallies_at_most_every_fold_every(postgres):
    """The dispatcher's housekeeping sums each tally key's deltas into one row, so a
    /metrics read stays a few rows per key however many writes came before."""
    from core.models import Tally

    Tally.objects.bulk_create(Tally(name="test.fold", key="k", n=1) for _ in range(5))
    dispatcher = Dispatcher(send=lambda queue, event_id, token: None)
    dispatcher.cycle()
    assert list(Tally.objects.filter(name="test.fold").values_list("n", flat=True)) == [5]
    Tally.objects.create(name="test.fold", key="k", n=-2)
    dispatcher.last_fold = time.monotonic()  # folded just now: not due again
    dispatcher.cycle()
    assert Tally.objects.filter(name="test.fold").count() == 2
    dispatcher.last_fold -= 3600
    dispatcher.cycle()
    assert list(Tally.objects.filter(name="test.fold").values_list("n", flat=True)) == [3]
