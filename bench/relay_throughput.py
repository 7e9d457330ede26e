"""Relay throughput: outbox rows/s from commit to ``sent`` through dispatcher + django-q2.

For each broker (``orm``: the app's database, where gobrave ships its own broker on
PostgreSQL; Redis) and each configuration, one dispatcher and the ``create`` cluster run;
N ``BenchNoop`` rows (the bench app's no-op kind on the ``create`` queue) are committed
at once and timed until the last is ``sent``. Against: django-q2's own ``async_task`` of
a no-op function, N tasks enqueued one by one to a ``create`` cluster of its own on the
same broker (for ``orm``: django-q2's stock ORM broker), timed until the last ran;
and Procrastinate, N no-op jobs deferred one by one on the same PostgreSQL server (its
own database), timed until the last succeeded.

    .venv/bin/python bench/relay_throughput.py [--rows 600] [--brokers orm,redis]
        [--config NAME:key=value,...]   (repeatable; replaces the default set)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import _common as c
import psycopg
import redis

CONFIGS = {
    # config.yml as shipped: create workers = create_queue_max_concurrency (3), batch 16,
    # prefetch 0, queue_limit 4, bulk 1, poll 0.1 s, save_limit -1.
    "default": {},
    # More workers than the default concurrency of 3 (the capacity gate is not in play for
    # no-op rows), a prefetch that hides the ORM broker's poll, a shorter broker poll.
    "tuned": {
        "queue_create_workers": 8,
        "outbox_prefetch": 8,
        "queue_queue_limit": 8,
        "queue_poll": 0.05,
    },
}
INSERT = """
INSERT INTO outbox_outboxevent
    (kind, queue, aggregate_id, payload, status, attempts, reclaims, available_at,
     last_error, outcome, created_at)
SELECT 'BenchNoop', 'create', %s || g, '{}'::jsonb, 'pending', 0, 0, now(), '', '', now()
FROM generate_series(1, %s) AS g
"""


def parse_config(text: str) -> tuple[str, dict]:
    name, _, body = text.partition(":")
    overrides = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        overrides[key.strip()] = value.strip()
    return name, overrides


def sent_count(conn, tag: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM outbox_outboxevent WHERE status = 'sent' AND aggregate_id LIKE %s",
        [tag + "%"],
    ).fetchone()[0]


class Profile:
    """CPU seconds of the dispatcher and cluster process trees, and the bench database's
    commits and row writes (pg_stat_database), between ``start()`` and ``stop()``.

    A backend that went idle less than a second after its last report keeps its counts
    for up to 10 s (PostgreSQL's idle flush interval), so ``start()`` waits that out, and
    ``stop()`` reads the CPU, stops the measured processes (an exiting backend reports
    everything) and only then reads the database's counts; the bench's own connection
    flushes its counts before each read (``pg_stat_force_next_flush``).
    """

    IDLE_FLUSH = 11.0  # s: PostgreSQL's PGSTAT_IDLE_INTERVAL (10 s), plus a margin

    def __init__(self, conn, procs) -> None:
        self.conn, self.procs = conn, procs

    def db_sample(self, wait: float) -> dict:
        time.sleep(wait)
        # This connection's own counts (the producer's insert) reach the shared statistics
        # only when it flushes them, at most once a second: a phase shorter than that
        # would miss them. Flush them first (its own transaction, left out in ``stop``).
        self.conn.execute("SELECT pg_stat_force_next_flush()")
        row = self.conn.execute(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        return {"commits": row[0], "writes": row[1]}

    def cpu_sample(self) -> dict:
        return {name: c.tree_cpu_seconds(p.pid) for name, p in self.procs.procs.items()}

    def start(self) -> None:
        self.before = {**self.db_sample(self.IDLE_FLUSH), **self.cpu_sample()}

    def stop(self, n: int, names: list[str], own: int = 0) -> str:
        """Figures per row of ``n``; stops the processes ``names`` on the way. ``own``: the
        bench's own transactions on the database meanwhile (its progress polls), left out."""
        cpu = self.cpu_sample()
        for name in names:
            self.procs.stop(name)
        after = {**self.db_sample(1.2), **cpu}
        # + 2: the first sample's read and the second's flush, transactions of our own
        after["commits"] -= own + 2
        delta = {k: (after[k] - self.before.get(k, 0)) / max(n, 1) for k in after}
        cpu_text = ", ".join(
            f"{k} {v * 1000:.1f} ms" for k, v in delta.items() if k not in ("commits", "writes")
        )
        return (
            f"per row: {delta['commits']:.2f} commits, {delta['writes']:.2f} row writes, "
            f"CPU {cpu_text}"
        )


def relay_phase(conn, procs, n: int, tag: str, timeout: float) -> dict:
    with conn.transaction():
        conn.execute(INSERT, [tag, n])
        conn.execute("NOTIFY gobrave_outbox")
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    done = polls = 0
    while time.monotonic() < deadline:
        done = sent_count(conn, tag)
        polls += 1
        if done >= n:
            break
        procs.check()
        time.sleep(0.02)
    elapsed = time.perf_counter() - t0
    return {"done": done, "elapsed": elapsed, "rate": done / elapsed, "polls": polls}


def raw_phase(env: dict, n: int, key: str, timeout: float) -> dict:
    result = subprocess.run(
        [c.PYTHON, "bench/_raw_django_q.py", str(n), key, str(timeout)],
        cwd=c.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout + 120,
    )
    if result.returncode:
        raise RuntimeError(f"raw django-q2 client failed:\n{result.stderr[-3000:]}")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    data["rate"] = data["done"] / data["elapsed_s"]
    return data


def run_config(url: str, broker: str, name: str, overrides: dict, args, redis_url: str) -> dict:
    """gobrave's relay on ``broker`` (``orm`` = the app's database: gobrave's own broker on
    PostgreSQL), then raw django-q2 on the same broker (``orm``: django-q2's stock ORM
    broker, the one django-q2 ships), each with a cluster of its own."""
    env = c.app_env(url, pool=None, queue_broker=broker, BENCH_REDIS_URL=redis_url, **overrides)
    raw_env = {**env, "BENCH_STOCK_ORM": "1"} if broker == "orm" else env
    with c.processes(f"relay-{name}") as procs, psycopg.connect(url, autocommit=True) as conn:
        procs.cluster("create", env)
        procs.dispatcher(env)
        stamp = f"{name}-{broker.split(':')[0]}-{time.monotonic_ns()}"
        warm = relay_phase(conn, procs, 10, f"warm-{stamp}-", 60)
        if warm["done"] < 10:
            raise RuntimeError(f"warm-up: only {warm['done']}/10 rows sent in 60 s")
        profile = Profile(conn, procs)
        profile.start()
        relay = relay_phase(conn, procs, args.rows, f"relay-{stamp}-", args.phase_timeout)
        relay["profile"] = (
            profile.stop(relay["done"], ["dispatcher", "create-cluster"], own=relay["polls"])
            + " (1 write and the 1 commit of all rows are the producer's insert; the bench's "
            f"{relay['polls']} progress polls left out)"
        )
        procs.cluster("create", raw_env, name="raw-cluster")
        time.sleep(2)  # the raw cluster is up
        profile = Profile(conn, procs)
        profile.start()
        raw = raw_phase(raw_env, args.rows, f"bench-raw-{stamp}", args.phase_timeout)
        raw["profile"] = profile.stop(raw["done"], ["raw-cluster"]) + " (+ the client's enqueues)"
        conn.execute("DELETE FROM outbox_outboxevent")
        conn.execute("DELETE FROM django_q_ormq")
    return {"relay": relay, "raw": raw}


def procrastinate_phase(args) -> dict:
    dbname = "gobrave_bench_procrastinate"
    dsn = c.create_database(dbname)
    env = {**c.app_env(dsn), "BENCH_PROCRASTINATE_DSN": dsn}
    try:
        subprocess.run(
            [c.PYTHON, "bench/_procrastinate_app.py", "schema"], cwd=c.REPO, env=env, check=True
        )
        import os

        os.environ["BENCH_PROCRASTINATE_DSN"] = dsn
        from _procrastinate_app import app, noop

        with c.processes("procrastinate") as procs, psycopg.connect(dsn, autocommit=True) as conn:
            procs.start(
                "procrastinate-worker",
                [c.PYTHON, "bench/_procrastinate_app.py", "worker", str(args.pc_concurrency)],
                env,
            )
            time.sleep(2)
            procs.check()
            with app.open():
                for i in range(10):  # warm-up
                    noop.defer(i=i)
                c.wait_until(
                    lambda: (
                        conn.execute(
                            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                        ).fetchone()[0]
                        >= 10
                    ),
                    timeout=60,
                    what="Procrastinate warm-up",
                )
                conn.execute("DELETE FROM procrastinate_jobs")
                t0 = time.perf_counter()
                for i in range(args.rows):
                    noop.defer(i=i)
                enqueue = time.perf_counter() - t0
            deadline = time.monotonic() + args.phase_timeout
            done = 0
            while time.monotonic() < deadline:
                done = conn.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                ).fetchone()[0]
                if done >= args.rows:
                    break
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
    finally:
        c.drop_database(dbname)
    return {"done": done, "elapsed": elapsed, "enqueue_s": enqueue, "rate": done / elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=600, help="rows/tasks/jobs per phase")
    parser.add_argument("--phase-timeout", type=float, default=25, help="max seconds per phase")
    parser.add_argument("--brokers", default="orm,redis")
    parser.add_argument("--redis-db", type=int, default=12, help="Redis db for the Redis broker")
    parser.add_argument("--config", action="append", help="NAME:section_key=value,...")
    parser.add_argument("--pc-concurrency", type=int, default=8, help="Procrastinate workers")
    parser.add_argument("--no-procrastinate", action="store_true")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    configs = dict(map(parse_config, args.config)) if args.config else CONFIGS
    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    brokers = {"orm": "orm", "redis": redis_url}

    c.header("relay throughput: commit -> sent, BenchNoop rows on the create queue")
    print(f"   {args.rows} rows per phase, at most {args.phase_timeout:g} s per phase")
    for name, overrides in configs.items():
        print(f"   config {name}: {overrides or 'config.yml as shipped'}")
    results: dict[tuple[str, str], dict] = {}
    with c.bench_database("relay", keep=args.keep_db) as url:
        for broker in args.brokers.split(","):
            if broker == "redis":
                r = redis.Redis.from_url(redis_url)
                r.delete("create")  # django-q2's list for cluster "create" in our db only
            for name, overrides in configs.items():
                res = run_config(url, brokers[broker], name, overrides, args, redis_url)
                results[broker, name] = res
                relay, raw = res["relay"], res["raw"]
                ratio = relay["rate"] / raw["rate"]
                print(
                    f"{broker:5s} {name:10s} relay {relay['rate']:7.1f} rows/s "
                    f"({relay['done']} in {relay['elapsed']:.1f}s) | raw django-q2 "
                    f"{raw['rate']:7.1f} tasks/s ({raw['done']} in {raw['elapsed_s']:.1f}s, "
                    f"enqueue {args.rows / raw['enqueue_s']:.0f}/s) | relay/raw {ratio:.2f} "
                    f"(target >= 0.9: {c.verdict(ratio >= 0.9)}) [{c.load()}]"
                )
                print(f"      relay {relay['profile']}\n      raw   {raw['profile']}")
    if not args.no_procrastinate:
        pc = procrastinate_phase(args)
        print(
            f"Procrastinate {pc['rate']:.1f} jobs/s ({pc['done']} in {pc['elapsed']:.1f}s, "
            f"defer {args.rows / pc['enqueue_s']:.0f}/s, concurrency {args.pc_concurrency}) "
            f"[{c.load()}]"
        )
        for (broker, name), res in results.items():
            ratio = res["relay"]["rate"] / pc["rate"]
            print(
                f"{broker:5s} {name:10s} relay / Procrastinate = {ratio:.2f} "
                f"(target >= 1: {c.verdict(ratio >= 1)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
