"""The bench app: a no-op outbox kind, and a polling-only switch for the latency bench.

- ``BenchNoop`` rows go to the ``create`` queue (cluster) and their handler does nothing,
  so a benchmark measures the relay itself: claim, hand-off, django-q2, the started_at
  compare-and-set, the outcome and its counter.
- ``BENCH_NO_LISTEN=1``: the dispatcher never LISTENs (polling only), for the latency
  benchmark; gobrave has no switch for it.
"""

from __future__ import annotations

import os

from django.apps import AppConfig

NOOP_KIND = "BenchNoop"


def noop_handler(event):
    from outbox.outcomes import Outcome

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
