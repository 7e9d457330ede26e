"""The bench app: a no-op outbox kind, and experiments switched on by environment.

- ``BenchNoop`` rows go to the ``create`` queue (cluster) and their handler does nothing,
  so a benchmark measures the relay itself: claim, hand-off, django-q2, the started_at
  compare-and-set, the outcome and its counter.
- ``BENCH_NO_LISTEN=1``: the dispatcher never LISTENs (polling only), for the latency
  benchmark; gobrave has no switch for it.
- ``BENCH_IN_FLIGHT_EXTRA=N``: an experiment, not gobrave's behaviour: each queue may
  have N more rows in flight than it has workers (room for django-q2's prefetch).
- ``BENCH_NOTIFY_ON_FINISH=1``: an experiment for the relay benchmark, not gobrave's
  behaviour: every recorded outcome also sends a NOTIFY, so a dispatcher waiting for a
  free in-flight slot wakes at once instead of at its next poll.
"""

from __future__ import annotations

import os

from django.apps import AppConfig

NOOP_KIND = "BenchNoop"


def noop_handler(event):
    from outbox.registry import Outcome

    return Outcome.SENT


class BenchConfig(AppConfig):
    name = "bench"
    label = "gobrave_bench"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        from outbox import registry

        registry.register(NOOP_KIND, queue="create", handler=noop_handler)
        if os.environ.get("BENCH_NO_LISTEN") == "1":
            from outbox.dispatcher import Dispatcher

            Dispatcher._listener = lambda self: None
        if os.environ.get("BENCH_NOTIFY_ON_FINISH") == "1":
            _notify_on_finish()
        if extra := int(os.environ.get("BENCH_IN_FLIGHT_EXTRA") or 0):
            from outbox import conf

            original = conf.in_flight_limit
            conf.in_flight_limit = lambda queue: original(queue) + extra


def _notify_on_finish() -> None:
    from outbox import relay
    from outbox.services import outbox_notify

    original = relay._finish

    def finish(event_id, token, **fields) -> bool:
        done = original(event_id, token, **fields)
        if done:
            outbox_notify()  # autocommit: sent now; inside _dead's atomic: at its commit
        return done

    relay._finish = finish
