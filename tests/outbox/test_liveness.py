"""What counts as alive at a dispatcher's start (contract §7: the cold start).

Every process of the installation keeps a mark: dispatchers, clusters' pushers, the
monitor. A dispatcher restarted while the others ran is no cold start; a whole
installation restarted is one, whichever of its processes comes up first.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now

from containers.execution.monitor import Monitor
from outbox import liveness
from outbox.broker import OutboxBroker
from outbox.models import DispatcherBeat

pytestmark = pytest.mark.django_db

LONG_AGO = dt.timedelta(minutes=5)


@pytest.fixture
def colds(monkeypatch):
    """How many times the cold-start callbacks ran."""
    calls: list[int] = []
    monkeypatch.setattr(liveness, "_callbacks", [lambda: calls.append(1)])
    return calls


def mark(name: str, kind: str, *, started_ago: dt.timedelta, beat_ago: dt.timedelta) -> None:
    DispatcherBeat.objects.create(
        name=name, kind=kind, started_at=Now() - started_ago, beat_at=Now() - beat_ago
    )


def test_a_dispatcher_restarted_while_a_cluster_and_the_monitor_run_is_no_cold_start(colds):
    mark("old-dispatcher", liveness.DISPATCHER, started_ago=LONG_AGO, beat_ago=LONG_AGO)
    mark("pusher", liveness.PUSHER, started_ago=LONG_AGO * 2, beat_ago=dt.timedelta(0))
    assert liveness.dispatcher_start(name=liveness.beat_name()) is False
    assert colds == []


@pytest.mark.parametrize("kind", [liveness.PUSHER, liveness.MONITOR])
def test_processes_that_came_up_just_before_the_dispatcher_do_not_hide_a_cold_start(colds, kind):
    """The whole installation was down; its clusters (or monitor) restarted first."""
    mark("old-dispatcher", liveness.DISPATCHER, started_ago=LONG_AGO, beat_ago=LONG_AGO)
    mark("fresh", kind, started_ago=dt.timedelta(0), beat_ago=dt.timedelta(0))
    assert liveness.dispatcher_start(name=liveness.beat_name()) is True
    assert liveness.dispatcher_start(name=liveness.beat_name()) is False  # decided once
    assert colds == [1]


@pytest.mark.parametrize("kind", [liveness.PUSHER, liveness.MONITOR])
def test_processes_that_came_up_well_before_the_dispatcher_do_not_hide_a_cold_start(colds, kind):
    """A reboot: the clusters (or the monitor) came up a minute before the dispatcher,
    longer than the window, but after the last dispatcher's last beat."""
    mark("old-dispatcher", liveness.DISPATCHER, started_ago=LONG_AGO * 3, beat_ago=LONG_AGO)
    mark("early", kind, started_ago=dt.timedelta(minutes=1), beat_ago=dt.timedelta(0))
    assert liveness.dispatcher_start(name=liveness.beat_name()) is True
    assert colds == [1]


def test_a_dispatcher_stopped_cleanly_and_started_again_while_clusters_run_is_warm(colds):
    mark("pusher", liveness.PUSHER, started_ago=LONG_AGO * 3, beat_ago=dt.timedelta(0))
    first = liveness.beat_name()
    mark(first, liveness.DISPATCHER, started_ago=LONG_AGO * 3, beat_ago=LONG_AGO)
    liveness.dispatcher_gone(name=first)
    DispatcherBeat.objects.filter(name=first).update(beat_at=Now() - LONG_AGO)  # down 5 min
    assert liveness.dispatcher_start(name=liveness.beat_name()) is False
    assert colds == []


def test_with_no_dispatcher_ever_a_start_is_cold(colds):
    mark("pusher", liveness.PUSHER, started_ago=LONG_AGO, beat_ago=dt.timedelta(0))
    assert liveness.dispatcher_start(name=liveness.beat_name()) is True
    assert colds == [1]


def test_a_cluster_s_pusher_and_the_monitor_keep_marks_of_their_own():
    OutboxBroker("create")._liveness_beat()
    Monitor()._liveness_beat()
    kinds = sorted(DispatcherBeat.objects.values_list("kind", flat=True))
    assert kinds == [liveness.MONITOR, liveness.PUSHER], list(DispatcherBeat.objects.values())


def test_the_cold_start_log_line_says_what_happened_in_an_operators_words(colds, caplog):
    mark("old-dispatcher", liveness.DISPATCHER, started_ago=LONG_AGO, beat_ago=LONG_AGO)
    with caplog.at_level("WARNING", logger="outbox.liveness"):
        assert liveness.dispatcher_start(name="d-new") is True
    (line,) = [r.getMessage() for r in caplog.records if r.name == "outbox.liveness"]
    assert "cold start" not in line
    assert "d-new" in line and "no gobrave process was alive" in line
    assert "recovering what the stopped processes left" in line
