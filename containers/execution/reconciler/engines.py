"""Which daemon a row points at (``engine_key``), one row per daemon, and an engine's
bounded share of a pass (``engine_share``)."""

from __future__ import annotations

from collections.abc import Iterable

from containers.engines import engine_for
from containers.engines.deadlines import EngineBusy, EngineDeadline, engine_busy
from containers.models import Runtime


def distinct_engines(runtimes: Iterable[Runtime]) -> list[Runtime]:
    """One runtime row per distinct engine (two rows may point at the same daemon)."""
    seen: dict[EngineKey, Runtime] = {}
    for runtime in sorted(runtimes, key=lambda r: r.pk):
        seen.setdefault(engine_key(runtime), runtime)
    return list(seen.values())


EngineKey = tuple[str, str]


def engine_key(runtime: Runtime) -> EngineKey:
    """Which daemon a row points at (rows with the same key share one engine): the key
    of ``distinct_engines``, the monitor's followers, the heartbeat and ``EngineDeadline``."""
    return (runtime.driver, runtime.base_url)


def engine_share(runtime: Runtime, seconds: float) -> EngineDeadline:
    """The runtime's engine for one share of a pass: every call ends within ``seconds``
    of now; raises ``EngineError`` at once when a call of an earlier share still hangs
    there (one waiting thread per engine at most)."""
    key = engine_key(runtime)
    if engine_busy(key):
        raise EngineBusy(
            "the engine has not yet answered a call of an earlier pass "
            f"(over its {seconds:g} s): skipped this pass"
        )
    return EngineDeadline(engine_for(runtime), key=key, seconds=seconds)
