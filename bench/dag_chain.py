"""DAG runs: a chain of 10 nodes, each ``true``, against 10 sequential bare docker runs.

The whole app runs as in ``end_to_end.py`` (PostgreSQL in its own bench database,
config.yml as shipped unless ``--config`` changes keys): one dispatcher, the ``create``
and ``control`` clusters and the monitor. Each sample starts a run of a 10-node chain
(``n0 → n1 → ... → n9``, gobrave-test-busybox, ``true``) and times it from the start
request to the run's ``succeeded``; interleaved with it, the docker SDK runs the same
10 containers one after another (create, start, wait for the exit). The ratio of the
medians is the figure (target at most 1.3). Where the time goes is read from the
history of every node: the runner's reaction (the previous node's exit seen → this
node's create requested), the hand-off to a create worker, the engine calls and the
container's own run up to ``stopped`` (the exit as gobrave sees it), and the runner's
settle (``stopped`` → node ``succeeded``). Every container carries
``io.gobrave.installation=<bench id>`` and all are removed at the end.

    .venv/bin/python bench/dag_chain.py [--samples 5] [--config NAME:key=value,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import _common as c
import docker
from end_to_end import cleanup
from relay_throughput import parse_config

IMAGE = "gobrave-test-busybox:latest"
NODES = 10
TARGET_RATIO = 1.3
CONFIGS = {"default": {}, "tuned": {"queue_poll": 0.02}}


def fixtures():
    from django.contrib.auth.models import User

    from containers.models import ContainerTemplate
    from dags.services import dag_template_save

    user = User.objects.create_user("bench", password="bench-password-1")
    ContainerTemplate.objects.create(
        name="bench-true",
        image=IMAGE,
        command=["true"],
        pull_policy="never",
        constraints={"engine": "docker"},
    )
    dag = dag_template_save(
        name="chain",
        nodes=[
            {"key": f"n{i}", "template": "bench-true", "depends_on": [f"n{i - 1}"] if i else []}
            for i in range(NODES)
        ],
    )
    return user, dag


def bare_chain(client, bench_id: str, tag: str) -> float:
    t0 = time.perf_counter()
    for i in range(NODES):
        container = client.containers.create(
            IMAGE,
            command=["true"],
            name=f"{bench_id}-bare-{tag}-{i}",
            labels={"io.gobrave.installation": bench_id},
            detach=True,
        )
        container.start()
        container.wait()
    return time.perf_counter() - t0


def gobrave_chain(user, dag, procs) -> dict:
    from containers.models import ContainerEvent
    from dags.models import DagEvent, DagNodeRun, DagRun
    from dags.services import dag_run_start
    from outbox.models import OutboxEvent

    t0 = time.time()
    run = dag_run_start(dag=dag, owner=user, actor="bench")

    def done():
        procs.check()
        status = DagRun.objects.filter(pk=run.pk).values_list("status", flat=True).first()
        if status not in ("pending", "running"):
            return status
        return None

    status = c.wait_until(done, timeout=120, interval=0.005, what=f"run {run.pk} done")
    if status != "succeeded":
        raise RuntimeError(f"run {run.pk} ended {status}")
    ended = DagRun.objects.get(pk=run.pk).finished_at.timestamp()
    parts: dict[str, list[float]] = {k: [] for k in ("react", "handoff", "engine", "settle")}
    previous_done = None
    for node in DagNodeRun.objects.filter(run=run).order_by("id"):
        events = {
            e.to_status: e.created_at.timestamp()
            for e in ContainerEvent.objects.filter(instance_id=node.instance_id)
        }
        row = OutboxEvent.objects.get(aggregate_id=str(node.instance_id), kind__contains="Create")
        node_events = {
            e.to_status: e.created_at.timestamp()
            for e in DagEvent.objects.filter(run_id=run.pk, node=node.key)
        }
        requested = events["pending"]
        if previous_done is not None:
            parts["react"].append(requested - previous_done)
        parts["handoff"].append(row.started_at.timestamp() - requested)
        # A container that exits at once may go creating -> stopped with no "running".
        parts["engine"].append(events["stopped"] - row.started_at.timestamp())
        parts["settle"].append(node_events["succeeded"] - events["stopped"])
        previous_done = events["stopped"]
    return {"total": ended - t0, **parts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--config", action="append", help="NAME:section_key=value,...")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    configs = dict(map(parse_config, args.config)) if args.config else CONFIGS
    bench_id = f"gbbench-{os.getpid()}-{int(time.time())}"
    client = docker.from_env()
    client.images.get(IMAGE)  # present, never pulled

    c.header(f"DAG chain of {NODES} 'true' nodes vs {NODES} sequential bare docker runs")
    print(f"   docker {client.version()['Version']}, bench id {bench_id}, {args.samples} samples")
    try:
        with c.bench_database("dag", keep=args.keep_db) as url:
            c.django_setup(c.app_env(url, settings="gobrave.settings"))
            user, dag = fixtures()
            for name, overrides in configs.items():
                print(f"config {name}: {overrides or 'config.yml as shipped'}")
                env = c.app_env(
                    url,
                    settings="gobrave.settings",
                    pool=None,
                    container_installation_id=bench_id,
                    **overrides,
                )
                with c.processes(f"dag-{name}") as procs:
                    procs.dispatcher(env)
                    procs.cluster("create", env)
                    procs.cluster("control", env)
                    procs.manage("monitor", "run_monitor", env=env)
                    time.sleep(3)  # clusters up
                    gobrave_chain(user, dag, procs)  # warm-up, not counted
                    bare_chain(client, bench_id, f"{name}-warm")
                    bare, ours = [], []
                    for i in range(args.samples):
                        bare.append(bare_chain(client, bench_id, f"{name}-{i}"))
                        ours.append(gobrave_chain(user, dag, procs))
                total = [s["total"] for s in ours]
                print(f"   bare docker, {NODES} runs in a row: {c.summary_ms(bare)}")
                print(f"   gobrave DAG run, start -> succeeded: {c.summary_ms(total)}")
                for part, what in (
                    ("react", "previous node's exit seen -> this node's create requested"),
                    ("handoff", "create requested -> create worker begins"),
                    ("engine", "worker begins -> stopped (create, start, run, exit seen)"),
                    ("settle", "stopped -> node succeeded (advance hand-off, settle)"),
                ):
                    values = [v for s in ours for v in s[part]]
                    print(
                        f"     {what:62s} p50 {c.percentile(values, 50) * 1000:6.1f} ms, "
                        f"mean {statistics.fmean(values) * 1000:6.1f} ms per node"
                    )
                ratio = statistics.median(total) / statistics.median(bare)
                print(
                    f"   ratio of medians {ratio:.2f} "
                    f"(target <= {TARGET_RATIO}: {c.verdict(ratio <= TARGET_RATIO)})"
                )
    finally:
        removed, left = cleanup(bench_id)
        print(f"   removed {removed} containers labelled {bench_id}; left: {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
