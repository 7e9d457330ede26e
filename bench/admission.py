"""Admission: concurrent POST /api/containers/ against a real gunicorn server.

Measures requests/s and p50/p99 latency of the create endpoint as gobrave serves it (the
global ``admission`` row lock and the pending count, contract §2) against the same
endpoint with that check patched away (``bench/wsgi_unlocked.py``), on the fake runtime
with no dispatcher (nothing runs; rows just queue), then checks exact admission: with
``max_pending=K`` and more than K simultaneous creates, exactly K are admitted. One user
makes every create, so the shipped per-owner quotas are lifted.

    .venv/bin/python bench/admission.py [--clients 16] [--requests 1500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common as c

TARGET_RATIO = 0.75


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(procs, name: str, app: str, env: dict, args) -> int:
    """gunicorn serving ``app``: uvicorn's ASGI workers for an ASGI app (as production and
    ``make run``), threaded workers (``args.threads``) for a WSGI one."""
    port = free_port()
    gunicorn = str(Path(c.PYTHON).parent / "gunicorn")
    if "asgi" in app:
        workers = ["--worker-class", "uvicorn_worker.UvicornWorker"]
        pool = int(env.get("DATABASE_POOL_MAX", "10"))
    else:
        workers = ["--worker-class", "gthread", "--threads", str(args.threads)]
        pool = args.threads + 2
    procs.start(
        name,
        [
            gunicorn,
            app,
            *workers,
            "--workers",
            str(args.workers),
            "--bind",
            f"127.0.0.1:{port}",
            "--keep-alive",
            "30",
            "--backlog",
            "512",
            "--log-level",
            "warning",
        ],
        {**env, "DATABASE_POOL_MAX": str(pool)},
    )
    return port


def wait_ready(procs, port: int, token: str) -> None:
    def ok() -> bool:
        procs.check()
        try:
            status, _ = request(port, token, "GET", "/api/queue/")
            return status == 200
        except OSError:
            return False

    c.wait_until(ok, timeout=60, interval=0.2, what=f"the server on :{port}")


def request(port: int, token: str, method: str, path: str, body: dict | None = None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, (response, data)
    finally:
        if own:
            conn.close()


def load(port: int, token: str, *, clients: int, total: int, duration: float) -> dict:
    """``clients`` threads with keep-alive connections POST creates until ``total`` or time."""
    lock = threading.Lock()
    issued = [0]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    start_gate = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        codes: dict[int, int] = {}
        start_gate.wait()
        try:
            while True:
                with lock:
                    if issued[0] >= total or time.monotonic() > deadline[0]:
                        break
                    issued[0] += 1
                t0 = time.perf_counter()
                try:
                    status, _ = request(
                        port, token, "POST", "/api/containers/", {"template": "bench"}, conn
                    )
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    status = 0
                mine.append(time.perf_counter() - t0)
                codes[status] = codes.get(status, 0) + 1
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)
                for k, v in codes.items():
                    statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    deadline[0] = time.monotonic() + duration
    start_gate.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {
        "rps": len(latencies) / elapsed,
        "elapsed": elapsed,
        "latencies": latencies,
        "statuses": statuses,
    }


def reset_tables() -> None:
    from django.db import connection

    from containers.models import ContainerEvent, ContainerInstance
    from core.models import Counter
    from outbox.models import OutboxEvent

    tables = [m._meta.db_table for m in (ContainerEvent, ContainerInstance, OutboxEvent)]
    tables.append(Counter._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)}")
        cursor.execute("VACUUM ANALYZE")  # the same starting point for every phase


def fixtures(fake_dir: str) -> str:
    from django.contrib.auth.models import User

    from containers.models import ContainerTemplate, Runtime
    from tenants.services import api_token_create

    user = User.objects.create_user("bench", password="bench-password-1")
    Runtime.objects.create(
        name="bench-fake", driver="fake", base_url=f"fake://{fake_dir}", labels={"engine": "fake"}
    )
    ContainerTemplate.objects.create(
        name="bench",
        image="gobrave-test-busybox:latest",
        command=["sleep", "3600"],
        pull_policy="never",
        constraints={"engine": "fake"},
    )
    return api_token_create(user=user, name="bench").key


def check_exact(procs, env: dict, token: str, args) -> bool:
    """K = ``--limit``; ``--burst`` simultaneous creates; exactly K must be admitted."""
    from containers.models import ContainerInstance
    from outbox.models import OutboxEvent

    reset_tables()
    env_k = {**env, "GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING": str(args.limit)}
    port = start_server(procs, "server-exact", args.locked_app, env_k, args)
    wait_ready(procs, port, token)
    results: list[tuple[int, str | None]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(args.burst)

    def one() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.connect()
        barrier.wait()
        status, (response, _) = request(
            port, token, "POST", "/api/containers/", {"template": "bench"}, conn
        )
        conn.close()
        with lock:
            results.append((status, response.getheader("Retry-After")))

    threads = [threading.Thread(target=one) for _ in range(args.burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    procs.stop("server-exact")
    admitted = sum(1 for s, _ in results if s == 202)
    refused = [r for s, r in results if s == 429]
    retry_ok = all(r is not None and int(r) >= 1 for r in refused)
    rows = ContainerInstance.objects.count()
    outbox = OutboxEvent.objects.count()
    other = len(results) - admitted - len(refused)
    ok = admitted == args.limit and rows == args.limit and outbox == args.limit and not other
    ok = ok and len(refused) == args.burst - args.limit and retry_ok
    print(
        f"exact admission: K={args.limit}, {args.burst} simultaneous creates -> "
        f"{admitted} x 202, {len(refused)} x 429 (Retry-After on all: {retry_ok}), "
        f"{other} other; {rows} instances, {outbox} outbox rows -> {'OK' if ok else 'WRONG'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients")
    parser.add_argument("--requests", type=int, default=1500, help="creates per phase")
    parser.add_argument("--duration", type=float, default=40, help="max seconds per phase")
    parser.add_argument("--rounds", type=int, default=2, help="locked/unlocked pairs")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    parser.add_argument("--limit", type=int, default=50, help="K for the exact check")
    parser.add_argument("--burst", type=int, default=200, help="creates for the exact check")
    parser.add_argument(
        "--locked-app",
        default="gobrave.wsgi:application",
        help="WSGI app of the locked variant (to try a change; PYTHONPATH reaches gunicorn)",
    )
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()

    c.header("admission: POST /api/containers/ (fake runtime, no dispatcher)")
    print(
        f"   gunicorn gthread {args.workers} workers x {args.threads} threads, "
        f"{args.clients} keep-alive clients, up to {args.requests} creates or "
        f"{args.duration:g}s per phase, {args.rounds} rounds"
    )
    fake_dir = tempfile.mkdtemp(prefix="gobrave-bench-fake-")
    ok = True
    try:
        with c.bench_database("admission", keep=args.keep_db) as url:
            env = c.app_env(url, settings="gobrave.settings", **c.NO_OWNER_QUOTAS)
            c.django_setup(env)
            token = fixtures(fake_dir)
            big = {**env, "GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING": "1000000"}
            with c.processes("admission") as procs:
                servers = {
                    "locked": start_server(procs, "locked", args.locked_app, big, args),
                    "unlocked": start_server(
                        procs, "unlocked", "bench.wsgi_unlocked:application", big, args
                    ),
                }
                for port in servers.values():
                    wait_ready(procs, port, token)
                results: dict[str, list[dict]] = {"locked": [], "unlocked": []}
                for rnd in range(args.rounds):
                    order = ("locked", "unlocked") if rnd % 2 == 0 else ("unlocked", "locked")
                    for variant in order:
                        reset_tables()
                        port = servers[variant]
                        load(port, token, clients=args.clients, total=60, duration=10)  # warm
                        reset_tables()
                        r = load(
                            port,
                            token,
                            clients=args.clients,
                            total=args.requests,
                            duration=args.duration,
                        )
                        results[variant].append(r)
                        print(
                            f"round {rnd + 1} {variant:8s}: {r['rps']:7.1f} req/s "
                            f"({sum(r['statuses'].values())} in {r['elapsed']:.1f}s, "
                            f"statuses {r['statuses']}); {c.summary_ms(r['latencies'])}"
                        )
                        ok = ok and set(r["statuses"]) == {202}
                procs.stop("locked")
                procs.stop("unlocked")
                med = {v: statistics.median(r["rps"] for r in rs) for v, rs in results.items()}
                lat = {v: [x for r in rs for x in r["latencies"]] for v, rs in results.items()}
                ratio = med["locked"] / med["unlocked"]
                for v in ("locked", "unlocked"):
                    print(
                        f"{v:8s} (median of rounds): {med[v]:.1f} req/s; all requests: "
                        f"{c.summary_ms(lat[v])}"
                    )
                print(
                    f"locked / unlocked throughput = {ratio:.2f} (target >= {TARGET_RATIO}: "
                    f"{c.verdict(ratio >= TARGET_RATIO)})"
                )
                ok = check_exact(procs, env, token, args) and ok
    finally:
        shutil.rmtree(fake_dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
