"""Counters buffered per process: written once, by a flush, never lost at a clean exit."""

from __future__ import annotations

import datetime as dt
import multiprocessing

import pytest
from django.db import connection
from django.utils import timezone

from core.counters import (
    counter_add,
    counters_buffer_start,
    counters_buffer_stop,
    counters_since,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _buffering_child() -> None:
    counters_buffer_start()
    for _ in range(3):
        counter_add("test_buffered", 2)
    # returning is a clean exit: multiprocessing's exit writes the buffer


def test_a_buffering_process_writes_its_counts_once_at_a_clean_exit():
    connection.close()  # the child must not inherit an open connection
    child = multiprocessing.get_context("fork").Process(target=_buffering_child)
    child.start()
    child.join(60)
    assert child.exitcode == 0
    since = timezone.now() - dt.timedelta(minutes=5)
    assert counters_since(since).get("test_buffered") == 6, counters_since(since)


def test_without_buffering_a_count_is_written_at_once():
    counter_add("test_direct", 3)
    since = timezone.now() - dt.timedelta(minutes=5)
    assert counters_since(since).get("test_direct") == 3


def test_stopping_the_buffer_writes_what_it_held_and_later_counts_at_once():
    since = timezone.now() - dt.timedelta(minutes=5)
    counters_buffer_start()
    try:
        counter_add("test_stopped", 2)
    finally:
        counters_buffer_stop()
    assert counters_since(since).get("test_stopped") == 2, counters_since(since)
    counter_add("test_stopped", 1)  # no flush thread any more: written at once
    assert counters_since(since).get("test_stopped") == 3, counters_since(since)


def _minute(ago: dt.timedelta) -> dt.datetime:
    return (timezone.now() - ago).replace(second=0, microsecond=0)


def test_rolling_up_old_minutes_keeps_every_total_and_drops_only_old_detail():
    from core.counters import ROLLUP_MINUTE, counter_totals, counters_roll_up
    from core.models import Counter

    Counter.objects.create(minute=_minute(dt.timedelta(days=9)), name="test_roll", count=4)
    Counter.objects.create(minute=_minute(dt.timedelta(days=8)), name="test_roll", count=5)
    Counter.objects.create(minute=_minute(dt.timedelta(days=8)), name="test_other", count=7)
    Counter.objects.create(minute=_minute(dt.timedelta(minutes=3)), name="test_roll", count=1)
    before = counter_totals(["test_roll", "test_other"])

    assert counters_roll_up(dt.timedelta(days=7)) == 3
    assert (
        counter_totals(["test_roll", "test_other"])
        == before
        == {
            "test_roll": 10,
            "test_other": 7,
        }
    )
    rows = sorted(Counter.objects.values_list("name", "minute", "count"))
    assert rows == [
        ("test_other", ROLLUP_MINUTE, 7),
        ("test_roll", ROLLUP_MINUTE, 9),
        ("test_roll", _minute(dt.timedelta(minutes=3)), 1),
    ], rows
    # A window never sees the rolled-up row; a second roll-up adds into it.
    assert counters_since(timezone.now() - dt.timedelta(days=30)) == {"test_roll": 1}
    Counter.objects.create(minute=_minute(dt.timedelta(days=10)), name="test_roll", count=2)
    assert counters_roll_up(dt.timedelta(days=7)) == 1
    assert counter_totals(["test_roll"]) == {"test_roll": 12}
    assert Counter.objects.get(name="test_roll", minute=ROLLUP_MINUTE).count == 11
