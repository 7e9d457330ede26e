"""The claim's statements are prepared once per connection (``core.prepared``), and
``DATABASE_PREPARED_STATEMENTS=0`` turns that off for poolers that cannot keep them."""

from __future__ import annotations

import pytest
from django.db import connection

from core import prepared
from gobrave import settings as gobrave_settings
from outbox import picking, relay
from tests.outbox.test_relay import enqueue, probe_kind  # noqa: F401 - its queue and kind

pytestmark = pytest.mark.django_db


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_a_claim_prepares_its_pick_once_and_reuses_it(postgres):
    enqueue()
    relay.claim("probe", 16)
    enqueue()
    relay.claim("probe", 16)
    picks = [s for s in _prepared_statements() if "WITH RECURSIVE due(key)" in s]
    assert len(picks) == 1, _prepared_statements()


def test_without_a_prepare_threshold_nothing_is_prepared(postgres, monkeypatch):
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    before = _prepared_statements()
    assert prepared.execute(picking.LOCK).fetchone() is not None
    assert _prepared_statements() == before


@pytest.mark.parametrize(("value", "threshold"), [("1", 5), ("0", None)])
def test_the_setting_sets_the_prepare_threshold(monkeypatch, value, threshold):
    monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", value)
    options = gobrave_settings._database("postgres://u@db:5432/x")["OPTIONS"]
    assert options.get("prepare_threshold") == threshold, options


def test_an_insert_stores_the_row_as_the_orm_would_and_reads_back_its_key(postgres):
    from django.db.models.functions import Now

    from outbox.models import OutboxEvent

    row = OutboxEvent(
        kind="TestProbe", queue="probe", aggregate_id="a", payload={"k": [1]}, available_at=Now()
    )
    prepared.insert(row)
    stored = OutboxEvent.objects.get(pk=row.pk)
    assert (stored.kind, stored.payload, stored.status, stored.attempts) == (
        "TestProbe",
        {"k": [1]},
        "pending",
        0,
    )
    assert stored.created_at == row.created_at  # the field's default, as the ORM sets it
    with connection.cursor() as cursor:  # Now(): the statement's time, on the database clock
        cursor.execute("SELECT now(), statement_timestamp()")
        began, now = cursor.fetchone()
    assert began <= stored.available_at <= now
    second = OutboxEvent(kind="TestProbe", queue="probe", aggregate_id="b", available_at=Now())
    prepared.insert(second)
    assert second.pk > row.pk and not second._state.adding


def test_a_compiled_read_puts_each_call_s_values_back(postgres):
    from outbox.models import OutboxEvent

    for aggregate in ("a", "b"):
        enqueue(aggregate)

    def by_aggregate(*, aggregate: str):
        return OutboxEvent.objects.filter(aggregate_id=aggregate).order_by("id")

    for aggregate in ("a", "b", "a"):
        row = prepared.first(("test-by-aggregate",), by_aggregate, aggregate=aggregate)
        assert row.aggregate_id == aggregate and row.kind == "TestProbe"
    assert prepared.first(("test-by-aggregate",), by_aggregate, aggregate="zz") is None


def test_a_value_the_queryset_does_not_use_is_refused(postgres):
    from outbox.models import OutboxEvent

    with pytest.raises(ValueError, match="not every value"):
        prepared.first(("test-unused",), lambda *, unused: OutboxEvent.objects.all(), unused="x")
