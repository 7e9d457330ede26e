"""Scale: claim latency with 1 thousand vs 1 million finished rows; dispatcher memory.

``outbox.relay.claim("create", batch_size)`` is timed in this process, with the outbox
holding 1,000 ``sent`` rows, then 1,000,000 (added with INSERT ... SELECT
generate_series, ``sent_at`` spread over the last day so retention keeps them, then
VACUUM ANALYZE as autovacuum would). Two cases each: an empty-due queue (claim finds
nothing) and a few due rows (claim takes as many as the in-flight limit allows; the
bench puts them back to ``pending`` between calls, outside the timing). The same two
table sizes time a ``/metrics`` scrape (its collector, as the view runs it). Then, with
the million rows still there, 100,000 due ``pending`` rows over 1,000 fairness keys: the
fair-share claim (round-robin by key) is timed the same way. Then a
dispatcher (``Dispatcher.run()`` as ``run_dispatcher`` runs it, with a cycle counter,
poll_interval 0.01 s) cycles N times over the 1-million-row table; its RSS is read from
/proc at cycles 1, 10, 100, 1000 and N.

    .venv/bin/python bench/scale.py [--big 1000000] [--iterations 300] [--cycles 3000]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

import _common as c

TARGET_RATIO = 1.5
SENT = """
INSERT INTO outbox_outboxevent
    (kind, queue, aggregate_id, payload, status, attempts, reclaims, available_at, last_error,
     outcome, created_at, sent_at, started_at)
SELECT 'BenchNoop', 'create', 'done-' || g, '{}'::jsonb, 'sent', 0, 0,
       now() - interval '1 day', '', 'sent', now() - interval '1 day',
       now() - random() * interval '1 day', now() - interval '1 day'
FROM generate_series(%s, %s) AS g
"""
DUE = """
INSERT INTO outbox_outboxevent
    (kind, queue, aggregate_id, payload, status, attempts, reclaims, available_at, last_error,
     outcome, created_at)
SELECT 'BenchNoop', 'create', 'due-' || g, '{}'::jsonb, 'pending', 0, 0, now(), '', '', now()
FROM generate_series(1, %s) AS g
RETURNING id
"""
FAIR = """
INSERT INTO outbox_outboxevent
    (kind, queue, aggregate_id, fairness_key, payload, status, attempts, reclaims,
     available_at, last_error, outcome, created_at)
SELECT 'BenchNoop', 'create', 'fair-' || g, 'owner-' || (g %% %s), '{}'::jsonb, 'pending', 0, 0,
       now(), '', '', now()
FROM generate_series(1, %s) AS g
"""


def measure_metrics(iterations: int) -> list[float]:
    """Seconds per /metrics scrape (the collector the view registers, rendered)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gobrave.metrics import DatabaseCollector

    out = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(DatabaseCollector())
        generate_latest(registry)
        out.append(time.perf_counter() - t0)
    return out


def measure_fair(iterations: int) -> tuple[list[float], int]:
    """Claim latency over the fair-share backlog; rows go back to pending between calls."""
    from outbox import conf, relay
    from outbox.models import FairnessMark, OutboxEvent

    batch = conf.value("batch_size")
    out, keys = [], set()
    for _ in range(iterations):
        t0 = time.perf_counter()
        claimed = relay.claim("create", batch)
        out.append(time.perf_counter() - t0)
        assert claimed, "a due row should have been claimed"
        ids = [row_id for row_id, _ in claimed]
        keys.update(OutboxEvent.objects.filter(id__in=ids).values_list("fairness_key", flat=True))
        OutboxEvent.objects.filter(id__in=ids).update(
            status="pending", claim_token=None, lease_expires_at=None
        )
    assert FairnessMark.objects.filter(queue="create").count() >= len(keys)
    return out, len(keys)


def measure(iterations: int, due_ids: list[int]) -> dict[str, list[float]]:
    from django.db import connection

    from outbox import conf, relay
    from outbox.models import OutboxEvent

    batch = conf.value("batch_size")
    out: dict[str, list[float]] = {"empty": [], "due": []}
    due = OutboxEvent.objects.filter(id__in=due_ids)
    for case in ("empty", "due"):
        park = (
            "available_at = now() + interval '1 day'" if case == "empty" else "available_at = now()"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE outbox_outboxevent SET status = 'pending', claim_token = NULL, "
                f"lease_expires_at = NULL, {park} WHERE id = ANY(%s)",
                [due_ids],
            )
        for _ in range(iterations):
            t0 = time.perf_counter()
            claimed = relay.claim("create", batch)
            out[case].append(time.perf_counter() - t0)
            if case == "due":
                assert claimed, "a due row should have been claimed"
                due.update(status="pending", claim_token=None, lease_expires_at=None)
            else:
                assert not claimed
    return out


def plan() -> str:
    """EXPLAIN ANALYZE of the claim's row query (what claim() runs, with its parameters)."""
    from django.db import connection, transaction

    from outbox import relay

    with transaction.atomic(), connection.cursor() as cursor:
        # The claim's per-key row query (fair share: each key's oldest unblocked rows).
        query = (
            relay._unblocked(relay._pending_due("create").filter(fairness_key=""))
            .order_by("id")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("id", "status", "started_at")[:3]
        )
        sql, params = query.query.sql_with_params()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
        lines = [row[0] for row in cursor.fetchall()]
        transaction.set_rollback(True)
    return "\n".join("      " + line for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1000, help="sent rows, first measure")
    parser.add_argument("--big", type=int, default=1_000_000, help="sent rows, second measure")
    parser.add_argument("--due", type=int, default=5, help="due rows in the 'due' case")
    parser.add_argument("--iterations", type=int, default=300, help="claims per case")
    parser.add_argument("--cycles", type=int, default=3000, help="dispatcher cycles for RSS")
    parser.add_argument("--plans", action="store_true", help="print the claim query plans")
    parser.add_argument("--fair-rows", type=int, default=100_000, help="fair-share backlog")
    parser.add_argument("--fair-keys", type=int, default=1000, help="its fairness keys")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()

    c.header("scale: claim latency vs finished rows; dispatcher RSS")
    with c.bench_database("scale", keep=args.keep_db) as url:
        env = c.app_env(url)
        c.django_setup(env)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(SENT, [1, args.small])
            cursor.execute(DUE, [args.due])
            due_ids = [row[0] for row in cursor.fetchall()]
            cursor.execute("VACUUM ANALYZE outbox_outboxevent")
        measure(20, due_ids)  # warm-up
        small = measure(args.iterations, due_ids)
        small_plan = plan()
        measure_metrics(5)
        small_metrics = measure_metrics(max(20, args.iterations // 10))
        t0 = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(SENT, [args.small + 1, args.big])
            inserted = time.perf_counter() - t0
            cursor.execute("VACUUM ANALYZE outbox_outboxevent")
            cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('outbox_outboxevent'))")
            size = cursor.fetchone()[0]
        print(
            f"   added {args.big - args.small:,} sent rows in {inserted:.1f}s "
            f"(+ VACUUM ANALYZE); outbox table with indexes: {size}"
        )
        measure(20, due_ids)
        big = measure(args.iterations, due_ids)
        big_plan = plan()
        measure_metrics(5)
        big_metrics = measure_metrics(max(20, args.iterations // 10))
        ok = True
        for case in ("empty", "due"):
            print(f"{args.small:>9,} sent, {case:5s}: claim {c.summary_ms(small[case])}")
            print(f"{args.big:>9,} sent, {case:5s}: claim {c.summary_ms(big[case])}")
            r50 = c.percentile(big[case], 50) / c.percentile(small[case], 50)
            r99 = c.percentile(big[case], 99) / c.percentile(small[case], 99)
            ok = ok and r50 <= TARGET_RATIO
            print(
                f"   {case}: ratio p50 {r50:.2f}, p99 {r99:.2f} (target p50 ratio <= "
                f"{TARGET_RATIO}: {c.verdict(r50 <= TARGET_RATIO)})"
            )
        print(f"{args.small:>9,} sent: /metrics scrape {c.summary_ms(small_metrics)}")
        print(f"{args.big:>9,} sent: /metrics scrape {c.summary_ms(big_metrics)}")
        r50 = c.percentile(big_metrics, 50) / c.percentile(small_metrics, 50)
        ok = ok and r50 <= TARGET_RATIO
        print(
            f"   /metrics: ratio p50 {r50:.2f} (target <= {TARGET_RATIO}: "
            f"{c.verdict(r50 <= TARGET_RATIO)})"
        )
        for rows, text in ((args.small, small_plan), (args.big, big_plan)):
            if args.plans:
                print(f"   claim row query plan, {rows:,} sent rows:\n{text}")
            else:
                used = sorted(
                    set(re.findall(r"(?:Index|Index Only) Scan (?:using |on )(\w+)", text))
                )
                took = re.search(r"Execution Time: ([\d.]+ ms)", text)
                print(
                    f"   claim row query, {rows:,} sent rows: {took.group(1) if took else '?'} "
                    f"(EXPLAIN ANALYZE), indexes: {', '.join(used)}"
                )

        # Fair share: a big backlog over many keys, on top of the million finished rows.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE outbox_outboxevent SET available_at = now() + interval '1 day' "
                "WHERE id = ANY(%s)",
                [due_ids],
            )
            t0 = time.perf_counter()
            cursor.execute(FAIR, [args.fair_keys, args.fair_rows])
            cursor.execute("VACUUM ANALYZE outbox_outboxevent")
            inserted = time.perf_counter() - t0
        measure_fair(20)
        fair, served = measure_fair(args.iterations)
        print(
            f"{args.fair_rows:,} pending over {args.fair_keys:,} fairness keys (+{args.big:,} "
            f"sent; {inserted:.1f}s to add): claim {c.summary_ms(fair)}; "
            f"{served} keys served in {args.iterations} claims"
        )
        r50 = c.percentile(fair, 50) / c.percentile(big["due"], 50)
        print(f"   vs {args.due} due rows on one key: ratio p50 {r50:.2f} (reported, no target)")
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM outbox_outboxevent WHERE aggregate_id LIKE 'fair-%%'")

        # Dispatcher memory over N cycles on the big table (nothing due: rows parked).
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE outbox_outboxevent SET available_at = now() + interval '1 day', "
                "status = 'pending', claim_token = NULL, lease_expires_at = NULL "
                "WHERE id = ANY(%s)",
                [due_ids],
            )
        denv = c.app_env(url, outbox_poll_interval=0.01)
        t0 = time.perf_counter()
        result = subprocess.run(
            [c.PYTHON, "bench/_dispatcher_rss.py", str(args.cycles)],
            cwd=c.REPO,
            env={**denv, "GOBRAVE_APP_NAME": "gobrave-bench-dispatcher-rss"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        elapsed = time.perf_counter() - t0
        if result.returncode:
            print(result.stderr[-3000:])
            return 1
        marks = [line.split() for line in result.stdout.splitlines() if line.strip()]
        shown = ", ".join(f"cycle {n}: {int(kib) / 1024:.1f} MiB" for n, kib in marks)
        print(f"dispatcher RSS ({args.cycles} cycles in {elapsed:.1f}s): {shown}")
        first, last = int(marks[0][1]), int(marks[-1][1])
        print(f"   growth from cycle 1 to {args.cycles}: {(last - first) / 1024:+.1f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
