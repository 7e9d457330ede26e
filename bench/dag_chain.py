"""DAG runs: a chain of 10 nodes, each ``true``, against 10 sequential bare docker runs.

The whole app runs as in ``end_to_end.py`` (PostgreSQL in its own bench database,
config.yml as shipped unless ``--config`` changes keys; a chain keeps one or two nodes'
instances alive, within the shipped per-owner quotas): one dispatcher, the ``create``
and ``control`` clusters and the monitor. Each sample starts a run of a 10-node chain
(``n0 → n1 → ... → n9``, gobrave-test-busybox, ``true``) and times it from the start
request to the run's ``succeeded``; interleaved with it, the docker SDK runs the same
10 containers one after another (create, start, wait for the exit). The ratio of the
medians is the figure (target at most 1.3); the 1-minute load average is printed with
it (the machine may be shared).

Where the time goes, per node, from two clocks: the engine's own events (create,
start, die, read from its event stream by a thread of this script) and the rows
(the instance's history, the outbox rows' ``started_at``): node i-1 exits → its exit
recorded (the instance ``stopped``, by a worker or the monitor) → the advance begun by
a worker → node i's create admitted (its instance ``pending``) → the create begun by a
create worker → the container created → started → exited. The same engine events
split the bare runs (exit → next created, created → started, started → exited).
Every container carries ``io.gobrave.installation=<bench id>`` and all are removed at
the end.

    .venv/bin/python bench/dag_chain.py [--samples 5] [--config NAME:key=value,...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import _common as c
from end_to_end import IMAGE, cleanup_reported, docker_bench
from relay_throughput import parse_config

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


def bare_chain(client, bench_id: str, tag: str, engine: c.EngineEvents) -> dict:
    t0 = time.perf_counter()
    names = []
    for i in range(NODES):
        name = f"{bench_id}-bare-{tag}-{i}"
        container = client.containers.create(
            IMAGE,
            command=["true"],
            name=name,
            labels={"io.gobrave.installation": bench_id},
            detach=True,
        )
        container.start()
        container.wait()
        names.append(name)
    total = time.perf_counter() - t0
    parts: dict[str, list[float]] = {k: [] for k in BARE_PARTS}
    for i, name in enumerate(names):
        created, started, died = (engine.of(name, a) for a in ("create", "start", "die"))
        parts["created_started"].append(started - created)
        parts["started_exit"].append(died - started)
        if i:
            parts["exit_next_created"].append(created - engine.of(names[i - 1], "die"))
    return {"total": total, **parts}


# Per node i, in the order the time passes (exit of node i-1 up to the exit of node i).
PARTS = {
    "exit_seen": "node i-1 exits (engine) -> its exit recorded (instance stopped)",
    "seen_advance": "exit recorded -> advance row begun by a control worker",
    "advance_admitted": "advance begun -> node i's create admitted (instance pending)",
    "admitted_claimed": "create admitted -> create row begun by a create worker",
    "claimed_created": "create begun -> container created (engine event)",
    "created_started": "container created -> started (engine events)",
    "started_exit": "started -> exited (engine events: the container's own run)",
}
BARE_PARTS = {
    "exit_next_created": "bare: exit -> next container created",
    "created_started": "bare: created -> started",
    "started_exit": "bare: started -> exited",
}


def gobrave_chain(user, dag, procs, engine: c.EngineEvents) -> dict:
    from containers.models import ContainerEvent, ContainerInstance
    from dags.models import DagNodeRun, DagRun
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
    advances = list(
        OutboxEvent.objects.filter(aggregate_id=str(run.pk)).values_list("started_at", "sent_at")
    )
    parts: dict[str, list[float]] = {k: [] for k in PARTS}
    parts["last_seen_succeeded"] = []
    seen_by: dict[str, int] = {}
    previous = None  # (engine exit, exit recorded) of the node before
    nodes = list(DagNodeRun.objects.filter(run=run).order_by("id"))
    for node in nodes:
        events = {
            e.to_status: e
            for e in ContainerEvent.objects.filter(instance_id=node.instance_id).order_by("id")
        }
        container = ContainerInstance.objects.filter(id=node.instance_id).first()
        container_name = container.container_name if container else f"gb-{node.instance_id}"
        row = OutboxEvent.objects.get(aggregate_id=str(node.instance_id), kind__contains="Create")
        admitted = events["pending"].created_at.timestamp()
        stopped = events["stopped"]
        seen_by[stopped.actor] = seen_by.get(stopped.actor, 0) + 1
        died = engine.of(container_name, "die")
        if previous is not None:
            exited, recorded = previous
            advance = min(
                (s.timestamp() for s, _ in advances if s and s.timestamp() <= admitted),
                key=lambda s: admitted - s,
            )
            parts["exit_seen"].append(recorded - exited)
            parts["seen_advance"].append(advance - recorded)
            parts["advance_admitted"].append(admitted - advance)
        parts["admitted_claimed"].append(row.started_at.timestamp() - admitted)
        created = engine.of(container_name, "create")
        parts["claimed_created"].append(created - row.started_at.timestamp())
        parts["created_started"].append(engine.of(container_name, "start") - created)
        parts["started_exit"].append(died - engine.of(container_name, "start"))
        previous = (died, stopped.created_at.timestamp())
    parts["last_seen_succeeded"].append(ended - previous[1])
    return {"total": ended - t0, "seen_by": seen_by, **parts}


def _p50(runs: list[dict], part: str) -> tuple[float, float]:
    values = [v for run in runs for v in run[part]]
    return c.percentile(values, 50) * 1000, statistics.fmean(values) * 1000


def report(bare: list[dict], ours: list[dict], loads: list[float]) -> None:
    bare_total = [s["total"] for s in bare]
    total = [s["total"] for s in ours]
    print(f"   load average (1 min) during the samples: {min(loads):.2f} to {max(loads):.2f}")
    print(f"   bare docker, {NODES} runs in a row: {c.summary_ms(bare_total)}")
    print(f"   gobrave DAG run, start -> succeeded: {c.summary_ms(total)}")
    print("   where a node's time goes (per node; p50 and mean in ms):")
    for part, what in PARTS.items():
        p50, mean = _p50(ours, part)
        print(f"     {what:66s} {p50:7.1f} {mean:7.1f}")
    p50, mean = _p50(ours, "last_seen_succeeded")
    print(f"     {'last exit recorded -> run succeeded':66s} {p50:7.1f} {mean:7.1f}")
    for part, what in BARE_PARTS.items():
        p50, mean = _p50(bare, part)
        print(f"     {what:66s} {p50:7.1f} {mean:7.1f}")
    seen: dict[str, int] = {}
    for run in ours:
        for actor, count in run["seen_by"].items():
            seen[actor] = seen.get(actor, 0) + count
    print(f"   exits recorded by: {', '.join(f'{a} {n}' for a, n in sorted(seen.items()))}")
    between = sum(_p50(ours, part)[0] for part in list(PARTS)[:5])
    bare_between = _p50(bare, "exit_next_created")[0]
    print(
        f"   from an exit to the next container created (sum of the p50s above): "
        f"gobrave {between:.1f} ms, bare {bare_between:.1f} ms per node"
    )
    per_node = (statistics.median(total) - statistics.median(bare_total)) / NODES * 1000
    print(f"   gobrave adds {per_node:.1f} ms per node (difference of the medians / {NODES})")
    ratio = statistics.median(total) / statistics.median(bare_total)
    print(
        f"   ratio of medians {ratio:.2f} "
        f"(target <= {TARGET_RATIO}: {c.verdict(ratio <= TARGET_RATIO)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--config", action="append", help="NAME:section_key=value,...")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    configs = dict(map(parse_config, args.config)) if args.config else CONFIGS
    bench_id, client = docker_bench()

    c.header(f"DAG chain of {NODES} 'true' nodes vs {NODES} sequential bare docker runs")
    print(f"   docker {client.version()['Version']}, bench id {bench_id}, {args.samples} samples")
    engine = c.EngineEvents(client)
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
                    gobrave_chain(user, dag, procs, engine)  # warm-up, not counted
                    bare_chain(client, bench_id, f"{name}-warm", engine)
                    bare, ours, loads = [], [], [os.getloadavg()[0]]
                    for i in range(args.samples):
                        bare.append(bare_chain(client, bench_id, f"{name}-{i}", engine))
                        ours.append(gobrave_chain(user, dag, procs, engine))
                        loads.append(os.getloadavg()[0])
                report(bare, ours, loads)
    finally:
        engine.close()
        cleanup_reported(bench_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
