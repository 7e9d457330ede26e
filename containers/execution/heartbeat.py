"""The engines' heartbeat: every engine pinged every ``engine_ping_interval`` (contract §9).

The monitor's event stream tells when an engine goes away only when the stream drops: a
silently cut link (no RST, no ICMP) leaves it waiting until the TCP keepalives give up
(about 25 s), and an idle engine sends nothing to miss. So the monitor also runs one
``Heartbeat`` thread, which each round:

1. Reads the enabled runtimes (one query) and pings each distinct engine (rows that
   share a daemon share its ping), all at once on the heartbeat's own threads, each
   bounded by ``engine_ping_timeout``. An engine whose last ping is still out (a client
   stuck connecting) is not asked again meanwhile: it counts as no answer.
2. Records each answer on every row of that daemon (``health.runtime_rows_health_record``):
   reachable at once; unreachable, with the reason, once ``MISSES`` pings in a row went
   unanswered (one slow answer on a loaded host is not a lost engine), which also marks
   the instances there ("engine unreachable since ...", ``engine_loss``): they keep
   their state.
3. Calls ``on_return`` for an engine that answers while its row says unreachable: the
   monitor then reconciles at once (which settles its instances from what the engine
   holds and clears their mark) and wakes that engine's follower.
4. With ``engine_lost_after`` set, gives up on the instances of each engine that did
   not answer and has been unreachable for longer (``engine_loss.runtime_engine_lost``,
   as the reconciler does too): here it happens within a round of the bound, even while
   the monitor's main thread is held in a reconcile pass by a call on the dead link.

The pings touch no database; only the heartbeat's own thread does (one connection,
closed at its end). Never raises: a failed round is logged and the next one comes.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from containers.actors import MONITOR
from containers.engines import engine_for
from containers.engines.base import EngineError
from containers.execution.engine_loss import runtime_engine_lost
from containers.execution.health import runtime_rows_health_record
from containers.execution.reconciler import EngineKey, distinct_engines, engine_key
from containers.models import Runtime

log = logging.getLogger(__name__)

POOL_THREADS = 16  # pings out at once (more engines wait for a thread: a longer round)
MISSES = 2  # unanswered pings in a row that make an engine unreachable


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


def _ping(runtime: Runtime, seconds: float) -> str:
    """'' when the engine answers within ``seconds``, else why not (no database)."""
    try:
        engine_for(runtime).check(timeout=seconds)
    except EngineError as exc:
        return str(exc) or "the engine did not answer"
    except Exception as exc:  # noqa: BLE001 - any failure of a ping is "no answer"
        return f"{type(exc).__name__}: {exc}"
    return ""


class Heartbeat:
    """Pings every enabled engine each ``interval`` seconds (see the module docstring).

    ``start()`` runs it on a daemon thread until ``stopping`` is set; ``beat()`` is one
    round, for tests and for the thread.
    """

    def __init__(
        self,
        *,
        stopping: threading.Event,
        on_return: Callable[[Runtime], None] = lambda runtime: None,
        interval: float | None = None,
        timeout: float | None = None,
    ) -> None:
        self.stopping = stopping
        self.on_return = on_return
        self.interval = float(interval or _config()["engine_ping_interval"])
        self.timeout = float(timeout or _config()["engine_ping_timeout"])
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=POOL_THREADS, thread_name_prefix="heartbeat-ping"
        )
        self._out: dict[EngineKey, concurrent.futures.Future[str]] = {}
        self._misses: dict[EngineKey, int] = {}
        self.thread = threading.Thread(target=self.run, name="monitor-heartbeat", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                close_old_connections()
                try:
                    self.beat()
                except Exception:  # noqa: BLE001 - the heartbeat outlives any one round
                    log.exception("heartbeat round failed; next in %.1fs", self.interval)
                self.stopping.wait(self.interval)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            connection.close()

    def beat(self) -> dict[EngineKey, str]:
        """One round: ping every engine of the enabled runtimes, record the answers.
        Returns ``{engine key: problem}`` ('' for an engine that answered)."""
        runtimes = distinct_engines(Runtime.objects.filter(enabled=True))
        asked: dict[EngineKey, concurrent.futures.Future[str]] = {}
        for runtime in runtimes:
            key = engine_key(runtime)
            previous = self._out.get(key)
            if previous is not None and not previous.done():
                continue  # still out: no answer this round either
            asked[key] = self._out[key] = self._pool.submit(_ping, runtime, self.timeout)
        concurrent.futures.wait(asked.values(), timeout=self.timeout)
        answers: dict[EngineKey, str] = {}
        lost_after = _config()["engine_lost_after"]
        for runtime in runtimes:
            key = engine_key(runtime)
            future = self._out[key]
            problem = (
                future.result()
                if future.done()
                else f"the engine did not answer within {self.timeout:g} s"
            )
            answers[key] = problem
            misses = self._misses[key] = self._misses.get(key, 0) + 1 if problem else 0
            if problem and misses < MISSES:
                log.info("runtime %s: a ping went unanswered (%s)", runtime.name, problem)
                continue
            runtime_rows_health_record(
                runtime=runtime, reachable=not problem, error=problem, actor=MONITOR
            )
            if not problem and runtime.health == Runtime.Health.UNREACHABLE:
                log.info("runtime %s: the engine answers again", runtime.name)
                self.on_return(runtime)
            if problem and lost_after is not None:
                rows = Runtime.objects.filter(
                    enabled=True, driver=runtime.driver, base_url=runtime.base_url
                )
                for runtime_id in rows.values_list("pk", flat=True):
                    runtime_engine_lost(runtime_id=runtime_id, after=float(lost_after))
        for key in set(self._out) - set(answers):  # engines no longer followed
            del self._out[key]
            self._misses.pop(key, None)
        return answers
