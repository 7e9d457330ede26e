"""The engine health record on Runtime rows (containers.execution.health), on the real database."""

from __future__ import annotations

import pytest

from containers.execution.health import runtime_health_check, runtime_health_record
from containers.execution.reconciler import reconcile
from containers.models import Runtime
from tests.factories import RuntimeFactory

pytestmark = pytest.mark.django_db


def _row(runtime: Runtime) -> Runtime:
    return Runtime.objects.get(pk=runtime.pk)


def _shown(row: Runtime) -> tuple:
    return (row.health, row.health_checked_at, row.health_since, row.last_seen_at, row.last_error)


def test_a_new_runtime_is_unknown_until_checked():
    row = _row(RuntimeFactory())
    assert (row.health, row.health_checked_at, row.health_since) == ("unknown", None, None)


def test_since_moves_only_when_the_health_changes():
    runtime = RuntimeFactory()
    runtime_health_record(runtime_id=runtime.pk, reachable=False, error="refused")
    first = _row(runtime)
    runtime_health_record(runtime_id=runtime.pk, reachable=False, error="refused again")
    second = _row(runtime)
    assert second.health == "unreachable", _shown(second)
    assert second.health_since == first.health_since, _shown(second)
    assert second.health_checked_at >= first.health_checked_at, _shown(second)
    assert second.last_error == "refused again", _shown(second)
    runtime_health_record(runtime_id=runtime.pk, reachable=True, node_name="node-a")
    third = _row(runtime)
    assert third.health == "reachable", _shown(third)
    assert third.health_since >= second.health_checked_at, _shown(third)
    assert third.last_error == "" and third.last_seen_at is not None, _shown(third)
    assert third.node_name == "node-a"
    runtime_health_record(runtime_id=runtime.pk, reachable=True, node_name="node-b")
    assert _row(runtime).node_name == "node-a"  # only an empty node name is filled


def test_a_failed_call_older_than_the_engine_s_last_answer_records_nothing():
    runtime = RuntimeFactory()
    runtime_health_record(runtime_id=runtime.pk, reachable=True)
    before_call = _row(runtime).last_seen_at
    # Another check hears the engine while the call waits on a connection of a cut link.
    runtime_health_record(runtime_id=runtime.pk, reachable=True)
    runtime_health_record(
        runtime_id=runtime.pk, reachable=False, error="timed out", unless_seen_since=(before_call,)
    )
    row = _row(runtime)
    assert (row.health, row.last_error) == ("reachable", ""), _shown(row)
    # Nobody heard it since the call began: recorded.
    runtime_health_record(
        runtime_id=runtime.pk,
        reachable=False,
        error="timed out",
        unless_seen_since=(row.last_seen_at,),
    )
    row = _row(runtime)
    assert (row.health, row.last_error) == ("unreachable", "timed out"), _shown(row)
    never = RuntimeFactory()
    runtime_health_record(
        runtime_id=never.pk, reachable=False, error="refused", unless_seen_since=(None,)
    )
    assert _row(never).health == "unreachable", _shown(_row(never))


def test_a_check_asks_the_engine_and_records_what_it_said():
    fine = RuntimeFactory()
    dead = RuntimeFactory(driver="docker", base_url="unix:///nonexistent/gobrave.sock")
    assert runtime_health_check(runtime=fine) is True
    assert runtime_health_check(runtime=dead) is False
    assert _row(fine).health == "reachable", _shown(_row(fine))
    row = _row(dead)
    assert row.health == "unreachable" and row.last_error, _shown(row)


def test_the_reconciler_refreshes_every_enabled_runtime(transactional_db):
    fine = RuntimeFactory()
    dead = RuntimeFactory(driver="docker", base_url="unix:///nonexistent/gobrave.sock")
    report = reconcile(runtimes=[fine, dead])
    assert len(report.errors) == 1, report.errors
    assert _row(fine).health == "reachable", _shown(_row(fine))
    row = _row(dead)
    assert row.health == "unreachable", _shown(row)
    assert row.last_error.startswith("no engine socket at /nonexistent/gobrave.sock ("), _shown(row)
