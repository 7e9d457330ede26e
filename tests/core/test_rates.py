"""Rates counted in the database (``core.leases.rate_hit``, the API throttles' count): a
burst of the limit, then one hit every period/limit; exact under concurrency; spent rows
deleted by later hits. Time passes by moving a row's ``expires_at``, never by waiting."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now

from core.leases import REAP_RATES, rate_hit
from core.models import Lease
from tests.processes import released_at_once

pytestmark = pytest.mark.django_db


def _hit(holder: str = "user:1", *, scope: str = "throttle:test", limit: int = 3):
    return rate_hit(scope=scope, holder=holder, limit=limit, period=60)


def _rows() -> list[tuple]:
    return list(
        Lease.objects.order_by("pk").values_list("scope", "holder", "key", "count", "expires_at")
    )


def _pass(seconds: float) -> None:
    """As if ``seconds`` went by: every rate row's arrival time moves that much back."""
    Lease.objects.update(expires_at=F("expires_at") - dt.timedelta(seconds=seconds))


def test_a_burst_of_the_limit_is_admitted_then_refused_with_the_wait_for_the_next():
    assert [_hit().allowed for _ in range(3)] == [True, True, True], _rows()
    refused = _hit()
    assert refused.allowed is False
    # 3 a minute: one more every 20 s; the statements ran an instant apart.
    assert 19 < refused.retry_after <= 20, refused
    _pass(refused.retry_after)
    assert _hit().allowed is True, _rows()
    assert _hit().allowed is False, _rows()


def test_a_refused_hit_changes_nothing():
    for _ in range(3):
        _hit()
    before = _rows()
    assert _hit().allowed is False
    assert _rows() == before


def test_each_holder_and_scope_is_counted_on_its_own():
    for _ in range(3):
        _hit("user:1")
    assert _hit("user:2").allowed is True
    assert _hit("user:1", scope="throttle:other").allowed is True
    assert _hit("user:1").allowed is False
    assert [(scope, holder, n) for scope, holder, _, n, _ in _rows()] == [
        ("throttle:test", "user:1", 3),
        ("throttle:test", "user:2", 1),
        ("throttle:other", "user:1", 1),
    ], _rows()


def test_a_new_rate_starts_a_fresh_count():
    for _ in range(3):
        _hit(limit=3)
    assert _hit(limit=3).allowed is False
    assert _hit(limit=10).allowed is True, _rows()


def test_spent_rows_are_deleted_by_later_hits_of_the_scope():
    for n in range(REAP_RATES + 1):
        _hit(f"user:{n}")
    _hit("user:9", scope="throttle:other")
    _hit("me")
    _pass(3600)  # every row spent: no row counts any more
    spent = {h for _, h, *_ in _rows()}
    assert _hit("me").allowed is True
    left = {h for _, h, *_ in _rows()}
    # The two most overdue rows of other holders of the scope went; "me" kept one row.
    assert spent - left == {"user:0", "user:1"}, _rows()
    assert _hit("me").allowed is True
    assert {h for _, h, *_ in _rows()} == {"me", "user:9"}, _rows()
    assert Lease.objects.get(holder="me").count == 3  # one row, every admitted hit


def test_a_hit_keeps_a_live_row_of_another_holder():
    _hit("user:1")
    _hit("user:2")
    assert Lease.objects.filter(expires_at__gt=Now()).count() == 2, _rows()


@pytest.mark.django_db(transaction=True)
def test_twenty_hits_at_once_admit_exactly_the_limit(postgres):
    def hit(_: int) -> str:
        try:
            return "admitted" if _hit(limit=5).allowed else "refused"
        except Exception as exc:  # noqa: BLE001 - any other error fails the test
            return repr(exc)
        finally:
            connection.close()  # back to the pool

    outcomes = released_at_once(hit, 20)
    assert sorted(outcomes) == ["admitted"] * 5 + ["refused"] * 15, outcomes
    assert [n for *_, n, _ in _rows()] == [5], _rows()
