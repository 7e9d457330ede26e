"""Supervision under repeated faults: SIGKILL of idle workers, busy workers, cluster mains.

The app runs as ``make run`` and the shipped units run it: one dispatcher and both
clusters under ``run_cluster`` (config as shipped unless ``--handoff-timeout`` /
``--liveness-timeout`` change it), on a bench database of its own and the file-backed
engine (the faults are in the queue layer, not the engine). Each round injects one
fault, then makes one create request and times kill → ``running`` (the recovery):

- ``idle``: SIGKILL of one idle worker of the create cluster, chosen at random (django-q2
  wedges when it was the one waiting on the task queue's read lock; the watchdog must
  then restart the cluster);
- ``busy``: SIGKILL of the worker inside a create's runtime call (the liveness timeout
  must free the row and another worker finish it);
- ``main``: SIGKILL of the create cluster's ``qcluster`` main (its processes must die
  with it and the watchdog start a new one).

Afterwards it checks: every request ``running``, no container made twice, no process
of an old cluster alive, and prints per kind the recoveries (p50, p95, max) and the
restarts the watchdog made.

    .venv/bin/python bench/supervision.py [--idle 20] [--busy 20] [--main 5]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import _common as c

WORKER = re.compile(r"ready for work at (\d+)")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def c_descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(parent(int(entry.name)), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def fixtures(fake_dir: str):
    from containers.models import Runtime

    Runtime.objects.filter(name="local").delete()
    return c.fake_fixtures(fake_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=20)
    parser.add_argument("--busy", type=int, default=20)
    parser.add_argument("--main", type=int, default=5)
    parser.add_argument("--handoff-timeout", type=float, default=None)
    parser.add_argument("--liveness-timeout", type=float, default=None)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    random.seed(args.seed)

    c.header("supervision: SIGKILL of idle workers, busy workers and cluster mains")
    fake_dir = tempfile.mkdtemp(prefix="gobrave-bench-fake-")
    engine_root = Path(fake_dir)
    ok = True
    try:
        with c.bench_database("supervision", keep=args.keep_db) as url:
            env = c.app_env(
                url,
                outbox_handoff_timeout=args.handoff_timeout,
                outbox_liveness_timeout=args.liveness_timeout,
                container_create_queue_max_pending=1000,
                **c.NO_OWNER_QUOTAS,  # one user makes every create
            )
            env["GOBRAVE_LOG_LEVEL"] = "INFO"  # the clusters' logs name their workers' pids
            c.django_setup(env)
            from django.conf import settings

            from containers.engines.fake import FakeEngine
            from containers.models import ContainerInstance
            from containers.requests.services import container_create_by_template
            from core.models import Counter

            print(
                f"   handoff_timeout {settings.OUTBOX['handoff_timeout']:g}s, liveness_timeout "
                f"{settings.OUTBOX['liveness_timeout']:g}s, delivery_timeout "
                f"{settings.OUTBOX['delivery_timeout']:g}s, create workers "
                f"{settings.GOBRAVE_CREATE_WORKERS}, broker {settings.GOBRAVE['queue']['broker']}"
            )
            owner, template = fixtures(fake_dir)
            engine = FakeEngine(f"fake://{fake_dir}")

            def restarts() -> int:
                return sum(
                    Counter.objects.filter(name="cluster_restarted").values_list("count", flat=True)
                )

            with c.processes("supervision") as procs:
                procs.dispatcher(env)
                supervisor = procs.manage(
                    "create-cluster", "run_cluster", "create", "--check-interval", "1", env=env
                )
                procs.manage("control-cluster", "run_cluster", "control", env=env)
                log = procs.logdir / "create-cluster.log"
                seen: set[int] = set()

                def workers() -> list[int]:
                    pids = [int(p) for p in WORKER.findall(log.read_text(errors="replace"))]
                    seen.update(pids)
                    return [p for p in pids if alive(p)]

                def cluster_main() -> int:
                    mains = [
                        p
                        for p in (int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit())
                        if parent(p) == supervisor.pid and alive(p)
                    ]
                    return mains[0] if mains else 0

                def settled(instance) -> bool:
                    stored = ContainerInstance.objects.get(pk=instance.pk)
                    if stored.status == "failed":
                        raise RuntimeError(f"{instance.pk} failed: {stored.status_reason}")
                    return stored.status == "running"

                def create_and_time(start: float) -> float:
                    instance = container_create_by_template(
                        template=template, owner=owner, actor="bench"
                    )
                    c.wait_until(lambda: settled(instance), timeout=600, what="running")
                    return time.monotonic() - start

                def start_calls() -> int:
                    return len(engine.call_records("start"))

                c.wait_until(lambda: len(workers()) >= 3, timeout=120, what="workers up")
                create_and_time(time.monotonic())  # warm up
                results: dict[str, list[float]] = {"idle": [], "busy": [], "main": []}
                restarted: dict[str, int] = {}
                plan = ["idle"] * args.idle + ["busy"] * args.busy + ["main"] * args.main
                for number, kind in enumerate(plan, 1):
                    before = restarts()
                    c.wait_until(lambda: len(workers()) >= 3, timeout=300, what="workers up")
                    if kind == "idle":
                        victim = random.choice(workers())
                        os.kill(victim, signal.SIGKILL)
                        results[kind].append(create_and_time(time.monotonic()))
                    elif kind == "busy":
                        (engine_root / "block-start").write_text("")
                        calls = start_calls()
                        instance = container_create_by_template(
                            template=template, owner=owner, actor="bench"
                        )
                        c.wait_until(
                            lambda calls=calls: start_calls() > calls,
                            timeout=300,
                            what="a worker in a start call",
                        )
                        victim = engine.call_records("start")[-1][2]
                        os.kill(victim, signal.SIGKILL)
                        start = time.monotonic()
                        (engine_root / "block-start").unlink()
                        c.wait_until(
                            lambda instance=instance: settled(instance),
                            timeout=600,
                            what="the killed create running",
                        )
                        results[kind].append(time.monotonic() - start)
                    else:
                        victim = cluster_main()
                        os.kill(victim, signal.SIGKILL)
                        results[kind].append(create_and_time(time.monotonic()))
                    restarted[kind] = restarted.get(kind, 0) + restarts() - before
                    print(
                        f"   {number:>2} {kind:<4} pid {victim:>7}: recovered in "
                        f"{results[kind][-1]:6.1f}s (restarts so far {restarts()})",
                        flush=True,
                    )
                statuses = set(ContainerInstance.objects.values_list("status", flat=True))
                created = engine.created()
                tree = set(c_descendants(supervisor.pid))
                stale = [p for p in seen if alive(p) and p not in tree]
                print()
                for kind, values in results.items():
                    if not values:
                        continue
                    print(
                        f"   {kind:<4} kills {len(values):>2}: recovery p50 "
                        f"{c.percentile(values, 50):.1f}s p95 {c.percentile(values, 95):.1f}s "
                        f"max {max(values):.1f}s; cluster restarts {restarted.get(kind, 0)}"
                    )
                total = ContainerInstance.objects.count()
                print(
                    f"   requests {total}, all running: {statuses == {'running'}}; containers "
                    f"made twice: {len(created) - len(set(created))}; old cluster processes "
                    f"alive: {len(stale)}"
                )
                ok = statuses == {"running"} and len(created) == len(set(created)) and not stale
                print(f"   invariants: {c.verdict(ok)}")
    finally:
        shutil.rmtree(fake_dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
