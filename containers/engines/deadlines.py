"""An engine whose calls must all end by one deadline: the reconciler's time per engine.

A reconcile pass goes from engine to engine; one that hangs (a frozen daemon, a link cut
in silence) would otherwise hold the pass for its client's timeout on every call.
``EngineDeadline`` wraps an engine for one engine's share of a pass: each call runs on a
thread of its own and is waited for only until the deadline; past it the caller gets
``EngineDeadlineExceeded`` and goes on, while the call ends on its thread (at the
client's own timeout at worst). The caller's thread keeps everything else, its database
connection included (a call must not touch the database, as with ``calls.bounded_call``).

An engine with a call still in flight from an earlier deadline is ``busy``: the next
pass skips it instead of starting another call that would hang too, so at most one
thread per engine is ever left waiting on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from containers.engines.base import Engine, EngineError

T = TypeVar("T")

_in_flight: dict[Hashable, threading.Thread] = {}  # engine key -> a call left past its deadline
_in_flight_lock = threading.Lock()


class EngineDeadlineExceeded(EngineError):
    """The engine did not answer within its share of the pass."""


class EngineBusy(EngineError):
    """A call left past an earlier deadline still waits on this engine: no new call was
    made (``engine_busy``). Says nothing new about the engine's health: the failure that
    left the call waiting was recorded when it happened."""


def engine_busy(key: Hashable) -> bool:
    """True while a call left past an earlier deadline on engine ``key`` still runs."""
    with _in_flight_lock:
        thread = _in_flight.get(key)
        if thread is not None and not thread.is_alive():
            del _in_flight[key]
            thread = None
    return thread is not None


class EngineDeadline:
    """``engine`` with every method call bounded by ``deadline`` (``time.monotonic()``).

    ``key`` names the engine (its driver and address) for ``engine_busy``; ``seconds``
    is the share given, for the error's message. Attributes that are not methods pass
    through. Thread-safe as the engine is.
    """

    def __init__(self, engine: Engine, *, key: Hashable, seconds: float) -> None:
        self._engine = engine
        self._key = key
        self._seconds = seconds
        self.deadline = time.monotonic() + seconds

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._engine, name)
        if not callable(value):
            return value

        def bounded(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, lambda: value(*args, **kwargs))

        return bounded

    def check(self, *, within: float | None = None) -> None:
        """``Engine.check``, bounded also by ``within`` seconds: a ping fails fast. Any
        error of the client's is an ``EngineError`` here (the reason for the health)."""
        try:
            self._call("check", self._engine.check, within=within)
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - a ping reports, as calls.engine_ping does
            raise EngineError(f"{type(exc).__name__}: {exc}") from exc

    def _call(self, name: str, call: Callable[[], T], *, within: float | None = None) -> T:
        """Run ``call`` on a thread; its result or its error, or ``EngineDeadlineExceeded``
        once the deadline (or ``within`` seconds) passes (the thread is then recorded as
        in flight)."""
        left = self.deadline - time.monotonic()
        if within is not None:
            left = min(left, within)
        if left <= 0:
            raise self._exceeded(name, within)
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                outcome["error"] = exc

        thread = threading.Thread(target=run, name=f"engine-call-{name}", daemon=True)
        thread.start()
        thread.join(left)
        if thread.is_alive():
            with _in_flight_lock:
                _in_flight[self._key] = thread
            raise self._exceeded(name, within)
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def _exceeded(self, name: str, within: float | None) -> EngineDeadlineExceeded:
        if within is not None and within < self._seconds:
            return EngineDeadlineExceeded(f"the engine did not answer within {within:g} s")
        return EngineDeadlineExceeded(
            f"the engine did not answer within its {self._seconds:g} s of the pass "
            f"({name} still waiting)"
        )
