"""The events feed's promise under concurrent writers: a reader that follows the cursor
while writers commit entries out of id order misses nothing and repeats nothing, in
each of its sources (instances, DAG runs, engines).

Writers are real threads with their own connections; each round makes entries commit
after higher-numbered ones (two transactions, the first held open until the second has
committed), and the reader follows the cursor the whole time (``core.write_order``)."""

from __future__ import annotations

import threading
import uuid

from django.db import connection, transaction

from containers.models import ContainerEvent, RuntimeEvent
from dags.models import DagEvent
from events.selectors import Filters, Position, events_page
from tests.events.feed import engine_event, event, settled

ROUNDS = 15


def test_a_reader_following_the_cursor_misses_and_repeats_nothing_under_out_of_order_commits(
    people,
):
    alice = people["alice"]
    actor = f"test:{uuid.uuid4().hex[:8]}"
    mine = Filters(actor=actor)  # only this test's entries, of every source
    root = people["root"]
    written: list[tuple[str, int]] = []
    stop, failures = threading.Event(), []

    def early_and_late(i: int, opened: threading.Event, go_on: threading.Event):
        try:
            with transaction.atomic():
                late = event(owner=alice, kind=f"late-{i}", actor=actor)
                late_engine = engine_event(kind=f"late-{i}", actor=actor)
                opened.set()
                go_on.wait(30)
            written.extend([("instance", late.id), ("engine", late_engine.id)])
        except Exception as exc:  # pragma: no cover - reported below
            failures.append(repr(exc))
        finally:
            connection.close()

    def writer():
        try:
            for i in range(ROUNDS):
                opened, go_on = threading.Event(), threading.Event()
                slow = threading.Thread(target=early_and_late, args=(i, opened, go_on))
                slow.start()
                opened.wait(30)
                with transaction.atomic():  # higher ids, committed first
                    fast = event(owner=alice, kind=f"early-{i}", actor=actor)
                    run = DagEvent.objects.create(
                        run_id=uuid.uuid4(), owner=alice, kind=f"dag-{i}", actor=actor
                    )
                    fast_engine = engine_event(kind=f"early-{i}", actor=actor)
                written.extend(
                    [("instance", fast.id), ("dag_run", run.id), ("engine", fast_engine.id)]
                )
                go_on.set()
                slow.join(30)
        except Exception as exc:  # pragma: no cover - reported below
            failures.append(repr(exc))
        finally:
            stop.set()
            connection.close()

    read: list[tuple[str, int]] = []
    position = Position()

    def follow() -> None:
        nonlocal position
        page = events_page(user=root, filters=mine, after=position, limit=4)
        read.extend((entry.source, entry.row.id) for entry in page.entries)
        position = page.position

    thread = threading.Thread(target=writer)
    thread.start()
    while not stop.is_set():
        follow()
    thread.join(30)
    assert not failures, failures
    settled()
    follow()
    while True:  # the rest, now that every writer has ended
        before = len(read)
        follow()
        if len(read) == before:
            break
    assert len(written) == 5 * ROUNDS
    assert len(read) == len(set(read)), f"repeated: {sorted(read)}"
    assert sorted(read) == sorted(written), f"missing: {set(written) - set(read)}"
    # ... in the feed's order: by transaction, so each round's late entry (its
    # transaction wrote first) before the early one that committed first
    order = {key: i for i, key in enumerate(read)}
    for model, source in ((ContainerEvent, "instance"), (RuntimeEvent, "engine")):
        for late in model.objects.filter(actor=actor, kind__startswith="late-"):
            early = model.objects.get(actor=actor, kind=f"early-{late.kind[5:]}")
            assert late.id < early.id and late.txid < early.txid
            assert order[(source, late.id)] < order[(source, early.id)]
