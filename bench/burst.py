"""Burst: N creates at once against ``create_queue_max_concurrency``, until all are running.

gobrave as shipped (config.yml without per-owner quotas: one user makes all N; PostgreSQL,
its own bench database, gobrave's default
connection pool, the real Docker Engine): gunicorn serving ``gobrave.asgi``, one
dispatcher, the ``create`` and ``control`` clusters and the monitor. N client threads,
released together by a barrier, each POST one create of a busybox template
(``gobrave-test-busybox:latest``, pull_policy never, ``sleep 600``); the time runs from
the release to the last instance's ``running`` transition (from its history, the
worker's clock). Baseline in the same run: the same N docker SDK create+starts of the
same image and command, run by K threads (K = ``create_queue_max_concurrency``, 3 as
shipped), timed from the first to the last start. Rounds alternate which goes first;
between rounds every container is removed and the tables emptied, outside the timing.

    .venv/bin/python bench/burst.py [--creates 50] [--rounds 2] [--set section_key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import _common as c
import docker
from admission import request, start_server, wait_ready
from end_to_end import COMMAND, IMAGE, cleanup, cleanup_reported, docker_bench, fixtures

TARGET_RATIO = 1.15


def threads_run(n: int, threads: int, one: Callable[[int], object]) -> tuple[float, list[float]]:
    """``one(i)`` for each i of ``range(n)``, taken in turn by ``threads`` threads: seconds
    from the first start to the last end, and each call's seconds. A thread whose call
    raises stops; the first error is raised after the join."""
    todo = iter(range(n))
    lock = threading.Lock()
    errors: list[BaseException] = []
    took: list[float] = []

    def work() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            began = time.perf_counter()
            try:
                one(i)
            except BaseException as exc:  # noqa: BLE001 - reported after the join
                errors.append(exc)
                return
            with lock:
                took.append(time.perf_counter() - began)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"bare create+start failed: {errors[0]!r}")
    return elapsed, took


def bare_round(client, bench_id: str, n: int, threads: int, tag: str) -> float:
    """N create+starts by ``threads`` threads; seconds from the first to the last start."""

    def one(i: int) -> None:
        container = client.containers.create(
            IMAGE,
            command=COMMAND,
            name=f"{bench_id}-burst-{tag}-{i}",
            labels={"io.gobrave.installation": bench_id},
            detach=True,
        )
        container.start()

    return threads_run(n, threads, one)[0]


def gobrave_round(port: int, token: str, n: int, procs, timeout: float) -> dict:
    from containers.models import ContainerEvent

    barrier = threading.Barrier(n + 1)
    answers: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def post() -> None:
        barrier.wait()
        status, (_, body) = request(port, token, "POST", "/api/containers/", {"template": "bench"})
        with lock:
            answers.append((status, body))

    clients = [threading.Thread(target=post) for _ in range(n)]
    for client in clients:
        client.start()
    t0 = time.time()
    barrier.wait()
    for client in clients:
        client.join()
    answered = time.time() - t0
    refused = [(status, body[:200]) for status, body in answers if status != 202]
    if refused:
        raise RuntimeError(f"{len(refused)} creates refused, e.g. {refused[0]}")
    ids = [json.loads(body)["id"] for _, body in answers]
    running = ContainerEvent.objects.filter(instance_id__in=ids, to_status="running")

    def all_running() -> bool:
        procs.check()
        return running.count() >= n

    # Polled gently: the time is read from the history, so the poll only has to notice the
    # end, and a tight poll would take CPU from the round it measures.
    c.wait_until(all_running, timeout=timeout, interval=0.2, what=f"{n} instances running")
    last = max(running.values_list("created_at", flat=True))
    return {"total": last.timestamp() - t0, "answered": answered, "slots": slot_use(ids, t0)}


def slot_use(ids: list[str], t0: float) -> str:
    """Where a round's time went, from the history: how long the instances held a slot
    (``creating`` → ``running``: the engine's calls and gobrave's work between them),
    against what the slots offered from the first ``creating`` to the last ``running``."""
    from django.conf import settings

    from containers.models import ContainerEvent

    times: dict[str, dict[str, float]] = {}
    rows = ContainerEvent.objects.filter(instance_id__in=ids, to_status__in=["creating", "running"])
    for instance_id, to, at in rows.values_list("instance_id", "to_status", "created_at"):
        times.setdefault(str(instance_id), {})[to] = at.timestamp()
    held = [t["running"] - t["creating"] for t in times.values() if len(t) == 2]
    first = min(t["creating"] for t in times.values())
    end = max(t["running"] for t in times.values())
    slots = settings.GOBRAVE["container"]["create_queue_max_concurrency"]
    return (
        f"first creating {first - t0:.2f} s after the release; slots held "
        f"{100 * sum(held) / (slots * (end - first)):.0f}% of the time from there to the "
        f"last running; creating -> running p50 {statistics.median(held) * 1000:.0f} ms"
    )


def reset(bench_id: str) -> None:
    """Empty the tables, remove every bench container, wait until the monitor has applied
    every engine event so far and the machine is quiet (the kernel tears the containers'
    network namespaces down after their removal), all outside the timing: the next round
    starts on a quiet machine. Emptied first, so the removals' events find no instance
    (nothing to apply)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE containers_containerinstance, outbox_outboxevent, django_q_ormq CASCADE"
        )
    since = time.time()
    cleanup(bench_id)
    monitor_settle(bench_id, since)
    waited = c.wait_quiet()
    print(f"     (reset: the monitor caught up and the machine quiet {waited:.1f} s later)")


def monitor_settle(bench_id: str, since: float, timeout: float = 120) -> None:
    """Wait until the monitor's cursor has reached the last event the engine reported for
    ``bench_id``'s containers since ``since`` (a Unix time)."""
    from containers.engines.docker import EVENT_ACTIONS  # what the monitor follows
    from containers.models import MonitorCursor

    client = docker.APIClient()
    until = time.time() + 0.001
    events = client.events(
        since=int(since),
        until=f"{until:.6f}",
        filters={
            "type": "container",
            "label": f"io.gobrave.installation={bench_id}",
            "event": sorted(EVENT_ACTIONS),
        },
        decode=True,
    )
    last = max((event["timeNano"] for event in events), default=0)
    if not last:
        return

    def settled() -> bool:
        # Docker's cursor is its nanosecond time as text (opaque to everything else).
        positions = MonitorCursor.objects.values_list("position", flat=True)
        return any(p.isdigit() and int(p) >= last for p in positions)

    c.wait_until(settled, timeout=timeout, interval=0.05, what="the monitor to apply every event")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--creates", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120, help="max seconds per round")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--set", action="append", default=[], help="section_key=value (e.g. outbox_prefetch=0)"
    )
    args = parser.parse_args()
    bench_id, client = docker_bench()

    c.header("burst: N creates at once -> all running, real Docker Engine")
    try:
        with c.bench_database("burst", keep=args.keep_db) as url:
            c.django_setup(c.app_env(url, settings="gobrave.settings"))
            from django.conf import settings

            threads = settings.GOBRAVE["container"]["create_queue_max_concurrency"]
            print(
                f"   docker {client.version()['Version']}, bench id {bench_id}, "
                f"{args.creates} creates, create_queue_max_concurrency {threads} "
                f"(bare: {threads} threads), {args.rounds} rounds"
            )
            token = fixtures()
            overrides = dict(item.split("=", 1) for item in args.set)
            env = c.app_env(
                url,
                settings="gobrave.settings",
                pool=None,
                container_installation_id=bench_id,
                **{**c.NO_OWNER_QUOTAS, **overrides},
            )
            shown = overrides or "config.yml as shipped"
            print(f"   config: {shown}, no per-owner quotas")
            bare, ours = [], []
            with c.processes("burst") as procs:
                port = start_server(
                    procs,
                    "web",
                    "gobrave.asgi:application",
                    env,
                    SimpleNamespace(workers=2, threads=4),
                )
                procs.dispatcher(env)
                procs.cluster("create", env)
                procs.cluster("control", env)
                procs.manage("monitor", "run_monitor", env=env)
                wait_ready(procs, port, token)
                time.sleep(2)  # clusters up
                gobrave_round(port, token, 3, procs, args.timeout)  # warm-up, not counted
                reset(bench_id)
                for r in range(args.rounds):
                    order = ("bare", "gobrave") if r % 2 == 0 else ("gobrave", "bare")
                    for which in order:
                        before = c.cpu_by_part(procs)
                        if which == "bare":
                            bare.append(bare_round(client, bench_id, args.creates, threads, str(r)))
                            print(f"   round {r + 1} bare    {bare[-1]:6.2f} s")
                        else:
                            result = gobrave_round(port, token, args.creates, procs, args.timeout)
                            ours.append(result["total"])
                            print(
                                f"   round {r + 1} gobrave {result['total']:6.2f} s (all "
                                f"{args.creates} answered 202 in {result['answered']:.2f} s)"
                            )
                            print(f"     {result['slots']}")
                        spent = c.cpu_spent(before, c.cpu_by_part(procs))
                        print(f"     CPU seconds: {spent}")
                        reset(bench_id)
            b, g = statistics.median(bare), statistics.median(ours)
            ratio = g / b
            print(
                f"   median: gobrave {g:.2f} s, bare {b:.2f} s, ratio {ratio:.2f} "
                f"(target <= {TARGET_RATIO}: {c.verdict(ratio <= TARGET_RATIO)})"
            )
    finally:
        cleanup_reported(bench_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
