"""``EngineDeadline``: an engine's share of a reconcile pass (the engine here is a stand-in
object whose calls wait on an event the test holds; the real frozen engine is in
test_fleet_monitor.py)."""

from __future__ import annotations

import threading

import pytest

from containers.engines.base import EngineError
from containers.engines.deadlines import EngineDeadline, EngineDeadlineExceeded, engine_busy
from tests.processes import wait_for


class Held:
    """Answers ``list_ours`` once ``release`` is set; ``inspect`` at once."""

    name = "held"

    def __init__(self) -> None:
        self.release = threading.Event()

    def list_ours(self, installation: str) -> list:
        self.release.wait(30)
        return [installation]

    def inspect(self, ref: str):
        if ref == "broken":
            raise EngineError("no such engine")
        return ref

    def check(self) -> None:
        raise OSError("connection refused")


def test_calls_within_the_share_return_their_answers_and_errors():
    engine = EngineDeadline(Held(), key="held:answers", seconds=5)
    assert engine.inspect("abc") == "abc"
    assert engine.name == "held"  # attributes pass through
    with pytest.raises(EngineError, match="no such engine"):
        engine.inspect("broken")
    with pytest.raises(EngineError, match="OSError: connection refused"):
        engine.check()


def test_a_call_past_the_deadline_raises_and_marks_the_engine_busy_until_it_ends():
    held = Held()
    engine = EngineDeadline(held, key="held:late", seconds=0.2)
    with pytest.raises(EngineDeadlineExceeded, match="within its 0.2 s of the pass"):
        engine.list_ours("x")
    assert engine_busy("held:late")
    with pytest.raises(EngineDeadlineExceeded):  # the share is spent: no new call starts
        engine.inspect("abc")
    held.release.set()
    wait_for(lambda: not engine_busy("held:late"), timeout=10, message="the late call ended")
