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
