"""Latency: commit of an outbox row to its claim, with NOTIFY and polling.

The bench commits one ``BenchNoop`` row at a time through ``outbox_enqueue`` (which
NOTIFYs), notes the wall clock right after COMMIT returns, waits until the row is
``processing`` and reads the claim time from it: ``claim()`` sets
``lease_expires_at = now + claim lease`` with ``now`` taken as it starts, so
``claimed_at = lease_expires_at - claim lease``. The bench then finishes the row itself
(``sent``) so the in-flight limit never fills, and waits a random 10-40 ms (plus, when
polling, a random part of the poll interval) before the next row, so that commits fall
at random points of the claimer's cycle. Nothing executes the rows.

Modes: ``notify`` (as shipped on PostgreSQL: the ``create`` cluster's pusher, gobrave's
broker, wakes on NOTIFY and claims; ``bench/_pusher.py`` runs that loop without
workers) and ``poll`` (a dispatcher alone; the bench app's ``BENCH_NO_LISTEN=1`` keeps it
from LISTENing; poll_interval as given); in between, ``notify-dispatcher``, the claimer
before gobrave's broker (a dispatcher LISTENing itself, with django-q2's ORM broker via
``BENCH_STOCK_ORM=1``), as the same run's baseline for ``notify``.

    .venv/bin/python bench/latency.py [--samples 300] [--poll-samples 60] [--poll-interval 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import _common as c

TARGET_P99 = 0.010


def sample_loop(n: int, procs, timeout: float, spread: float = 0.0) -> list[float]:
    from django.db import transaction
    from django.utils import timezone

    from outbox import conf
    from outbox.models import OutboxEvent
    from outbox.services import outbox_enqueue

    lease = conf.claim_lease("create")
    latencies: list[float] = []
    deadline = time.monotonic() + timeout
    for i in range(n):
        if time.monotonic() > deadline:
            print(f"  (stopped after {i} samples: {timeout:g}s bound)")
            break
        with transaction.atomic():
            event = outbox_enqueue(kind="BenchNoop", aggregate_id=f"lat-{i}", payload={})
        committed = time.time()
        row = c.wait_until(
            lambda event=event: (
                OutboxEvent.objects.filter(id=event.id, status="processing")
                .values_list("lease_expires_at", flat=True)
                .first()
            ),
            timeout=30,
            interval=0.002,
            what=f"the claim of row {event.id}",
        )
        claimed = (row - lease).timestamp()
        latencies.append(claimed - committed)
        OutboxEvent.objects.filter(id=event.id).update(
            status="sent", sent_at=timezone.now(), lease_expires_at=None, outcome="sent"
        )
        procs.check()
        time.sleep(random.uniform(0.01, 0.04) + random.uniform(0, spread))
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300, help="samples with NOTIFY")
    parser.add_argument("--poll-samples", type=int, default=60, help="samples polling only")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="outbox poll_interval")
    parser.add_argument("--max-seconds", type=float, default=100, help="bound per mode")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()

    c.header("latency: commit -> claim (NOTIFY: the create cluster's pusher; poll: dispatcher)")
    with c.bench_database("latency", keep=args.keep_db) as url:
        env = c.app_env(url, outbox_poll_interval=args.poll_interval)
        c.django_setup(env)
        from django_q.models import OrmQ

        results = {}
        modes = (
            ("notify", args.samples),
            ("notify-dispatcher", args.samples),
            ("poll", args.poll_samples),
        )
        for mode, n in modes:
            with c.processes(f"latency-{mode}") as procs:
                if mode == "notify":  # the shipped claimer: the create cluster's pusher
                    procs.start("pusher", [c.PYTHON, "bench/_pusher.py"], env)
                elif mode == "notify-dispatcher":  # before gobrave's broker: a dispatcher
                    procs.dispatcher({**env, "BENCH_STOCK_ORM": "1"})  # LISTENing itself
                else:  # the dispatcher alone, polling every poll_interval
                    procs.dispatcher({**env, "BENCH_NO_LISTEN": "1"})
                time.sleep(1.5)  # let it start and LISTEN
                sample_loop(3, procs, 30)  # warm-up, not counted
                spread = args.poll_interval if mode == "poll" else 0.0
                results[mode] = sample_loop(n, procs, args.max_seconds, spread)
            OrmQ.objects.all().delete()  # the hand-offs nobody ran
            print(
                f"{mode:17s} (poll_interval {args.poll_interval:g}s): commit -> claim "
                f"{c.summary_ms(results[mode])}"
            )
        p99 = c.percentile(results["notify"], 99)
        print(
            f"NOTIFY p99 = {p99 * 1000:.1f} ms (target <= {TARGET_P99 * 1000:g} ms: "
            f"{c.verdict(p99 <= TARGET_P99)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
