"""``outbox_supersede_waiting``: a gone aggregate's waiting rows end sent/superseded."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from core.counters import counter_totals
from outbox.counters import RelayStat
from outbox.models import OutboxEvent, OutboxStatus
from outbox.services import outbox_supersede_waiting
from tests.outbox.conftest import enqueue_row, kind_registered

KIND, QUEUE = "TestSupersede", "test-supersede"


def _rows() -> dict[int, tuple[str, str, str, str]]:
    return {
        row.id: (row.aggregate_id, row.status, row.outcome, row.last_error)
        for row in OutboxEvent.objects.filter(kind=KIND)
    }


@pytest.mark.django_db
def test_only_the_aggregates_pending_rows_end_superseded_with_the_reason_and_are_counted():
    with kind_registered(KIND, queue=QUEUE, workers=1):
        first, second = enqueue_row(KIND, "gone"), enqueue_row(KIND, "gone")
        other = enqueue_row(KIND, "kept")
        held = enqueue_row(KIND, "gone")
        OutboxEvent.objects.filter(pk=held.pk).move_to(OutboxStatus.PROCESSING)
        before = counter_totals([RelayStat.SUPERSEDED]).get(RelayStat.SUPERSEDED, 0)
        assert outbox_supersede_waiting(aggregate_id="gone", reason="engine gone") == 2
        rows = _rows()
        gone = ("gone", "sent", "superseded", "engine gone")
        assert (rows[first.pk], rows[second.pk]) == (gone, gone), rows
        assert rows[other.pk] == ("kept", "pending", "", ""), rows
        assert rows[held.pk] == ("gone", "processing", "", ""), rows
        after = counter_totals([RelayStat.SUPERSEDED]).get(RelayStat.SUPERSEDED, 0)
        assert after - before == 2
        assert outbox_supersede_waiting(aggregate_id="gone", reason="again") == 0  # idempotent


@pytest.mark.django_db(transaction=True)
def test_a_row_another_transaction_holds_is_skipped_not_waited_for(postgres):
    with kind_registered(KIND, queue=QUEUE, workers=1):
        locked, free = enqueue_row(KIND, "gone"), enqueue_row(KIND, "gone")
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:  # a claim in progress, on a connection of its own
            try:
                with transaction.atomic():
                    OutboxEvent.objects.select_for_update().filter(pk=locked.pk).first()
                    holding.set()
                    release.wait(timeout=30)
            finally:
                connection.close()

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(timeout=30)
            assert outbox_supersede_waiting(aggregate_id="gone", reason="engine gone") == 1
        finally:
            release.set()
            holder.join()
        rows = _rows()
        assert rows[free.pk][1:3] == ("sent", "superseded"), rows
        assert rows[locked.pk][1:3] == ("pending", ""), rows
