"""The events feed's promise under concurrent writers: a reader that follows the cursor
while writers commit entries out of id order misses nothing and repeats nothing.

Writers are real threads with their own connections; each round makes an entry commit
after a higher-numbered one (two transactions, the first held open until the second has
committed), and the reader follows the cursor the whole time (``core.write_order``)."""

from __future__ import annotations

import threading
import uuid

from django.db import connection, transaction

from containers.models import ContainerEvent
from dags.models import DagEvent
from events.selectors import Filters, Position, events_page
from tests.events.feed import event, settled

ROUNDS = 15


def test_a_reader_following_the_cursor_misses_and_repeats_nothing_under_out_of_order_commits(
    people,
):
    alice = people["alice"]
    mine = Filters(owner_ids=[alice.pk])  # only this test's entries
    root = people["root"]
    written: list[tuple[str, int]] = []
    stop, failures = threading.Event(), []

    def early_and_late(i: int, opened: threading.Event, go_on: threading.Event):
        try:
            with transaction.atomic():
                late = event(owner=alice, kind=f"late-{i}")
                opened.set()
                go_on.wait(30)
            written.append(("instance", late.id))
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
                with transaction.atomic():  # a higher id, committed first
                    fast = event(owner=alice, kind=f"early-{i}")
                    run = DagEvent.objects.create(
                        run_id=uuid.uuid4(), owner=alice, kind=f"dag-{i}", actor="x"
                    )
                written.extend([("instance", fast.id), ("dag_run", run.id)])
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
    assert len(written) == 3 * ROUNDS
    assert len(read) == len(set(read)), f"repeated: {sorted(read)}"
    assert sorted(read) == sorted(written), f"missing: {set(written) - set(read)}"
    # ... in the feed's order: by transaction, so each round's late entry (its
    # transaction wrote first) before the early one that committed first
    order = {key: i for i, key in enumerate(read)}
    for late in ContainerEvent.objects.filter(owner=alice, kind__startswith="late-"):
        early = ContainerEvent.objects.get(owner=alice, kind=f"early-{late.kind[5:]}")
        assert late.id < early.id and late.txid < early.txid
        assert order[("instance", late.id)] < order[("instance", early.id)]
