"""Chaos soak: steady traffic while faults of every kind strike at random (issue 16 item 7).

Runs the app's real processes (two ``run_dispatcher``, the create and control clusters
each under ``run_cluster``, ``run_monitor``) against a Docker Engine of its own started
with ``--live-restore`` (``tests/private_engine.py``: never the machine's engine) and a
PostgreSQL of its own (``tests/throwaway_postgres.py``). Meanwhile:

- traffic: create/start/stop/delete requests from four owners, picked from what the
  database says (stop a running instance, start a stopped one, delete any), a few
  hundred live at most, and a small DAG run (a, then b and c) every ``--dag-every`` s;
- faults, one after another at random intervals around ``--fault-every`` s, drawn as
  shuffled rounds of: SIGKILL of an idle worker, of a busy worker (one inside a
  handler, by its log), of a cluster's ``qcluster`` main, of a dispatcher, of the
  monitor; a restart of the private ``dockerd`` (down 1-3 s); a restart of the private
  PostgreSQL (``pg_ctl stop -m fast``, down 1-3 s).

Who brings what back: a killed worker is replaced by django-q2's sentinel, a cluster
wedged by a dead idle worker and a killed cluster main by ``run_cluster``'s watchdog
(the project's supervision); a killed dispatcher or monitor by this soak acting as the
process manager, 2 s after it exited, as the shipped systemd units do
(``Restart=always``, ``RestartSec=2``). The engine and the database are restarted by
the fault itself.

Then, with faults and traffic stopped and everything quiet, it checks: every accepted
request ended in the state its last request asks for (``failed`` only with a reason,
listed), no instance has two containers, no container of ours lacks an instance, no
outbox row is ``processing`` past its lease, the concurrency cap was never exceeded
(slots sampled every 50 ms as ``containers.requests.slots`` counts them), every DAG run
finished. It prints requests by kind, faults by kind with their recoveries, and the
violations (the exit status is 1 when there is any).

    .venv/bin/python bench/chaos_soak.py --minutes 10
    .venv/bin/python bench/chaos_soak.py --seconds 60 --fast --json report.json  # the test
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import _common as c
from _chaos import FAULT_KINDS, ClusterLog, Faults, Keeper, Part, SlotSampler, Traffic, now

from tests.private_engine import PrivateDockerd
from tests.processes import wait_for
from tests.throwaway_postgres import ThrowawayPostgres

IMAGE = "gobrave-test-busybox:latest"
# Exits 0 on SIGTERM at once (a stop ends "stopped"); no busy loop on a loaded host.
SLEEPER = 'trap "exit 0" TERM; sleep 86400 & wait'
CAP = 3  # create_queue_max_concurrency; the create cluster gets one worker more
FAST = {
    "container_reconcile_interval": "2",
    "container_stop_timeout": "2",
    "outbox_poll_interval": "0.2",
    "outbox_backoff_base": "0.3",
    "outbox_delivery_timeout": "60",
    "outbox_lease_margin": "5",
    "outbox_liveness_timeout": "5",
    "outbox_handoff_timeout": "6",
    "queue_poll": "0.05",
}


def fixtures(engine_url: str):
    from django.contrib.auth.models import User

    from containers.models import ContainerTemplate, Runtime
    from dags.services import dag_template_save

    Runtime.objects.all().delete()  # the migration's "local" row is the machine's engine
    Runtime.objects.create(
        name="soak", driver="docker", base_url=engine_url, labels={"engine": "docker"}
    )
    owners = [User.objects.create_user(f"owner{n}", password="soak-password-1") for n in range(4)]
    template = ContainerTemplate.objects.create(
        name="sleeper", image=IMAGE, command=["sh", "-c", SLEEPER], pull_policy="never",
        constraints={"engine": "docker"},
    )  # fmt: skip
    ContainerTemplate.objects.create(
        name="shell", image=IMAGE, command=["sh", "-c", "true"], pull_policy="never",
        constraints={"engine": "docker"},
    )  # fmt: skip
    dag = dag_template_save(
        name="soak-dag",
        nodes=[
            {"key": "a", "template": "shell", "command": ["true"]},
            {"key": "b", "template": "shell", "command": ["sleep", "1"], "depends_on": ["a"]},
            {"key": "c", "template": "shell", "command": ["true"], "depends_on": ["a"]},
        ],
    )
    return owners, template, dag


def parts(env: dict[str, str]) -> list[Part]:
    manage = [c.PYTHON, "manage.py"]
    cluster_env = {**env, "GOBRAVE_LOG_LEVEL": "INFO"}  # the logs name the workers' pids
    clusters = [
        Part(
            f"{queue}-cluster",
            [*manage, "run_cluster", queue, "--check-interval", "1"],
            cluster_env,
        )
        for queue in ("create", "control")
    ]
    return [
        Part("dispatcher-1", [*manage, "run_dispatcher"], env),
        Part("dispatcher-2", [*manage, "run_dispatcher"], env),
        *clusters,
        Part("monitor", [*manage, "run_monitor"], env),
    ]


def figures(report: dict) -> None:
    print("\n   requests accepted by kind: " + ", ".join(
        f"{k} {v}" for k, v in sorted(report["requests"].items())
    ))  # fmt: skip
    print("   refused: " + (", ".join(f"{k} {v}" for k, v in report["refused"].items()) or "none"))
    print(f"   requests whose answer was lost with the database: {report['lost']}")
    by_kind: dict[str, list[dict]] = {}
    for entry in report["recoveries"]:
        by_kind.setdefault(entry["kind"], []).append(entry)
    print(
        "   fault          n   back (p50/max)   next request done (p50/max)   killed request done"
    )
    for kind in FAULT_KINDS:
        entries = by_kind.get(kind, [])

        def stat(key: str, entries=entries) -> str:
            values = [e[key] for e in entries if e.get(key) is not None]
            if not values:
                return "-"
            return f"{c.percentile(values, 50):.1f}/{max(values):.1f}s"

        print(
            f"   {kind:<13} {len(entries):>2}   {stat('back_s'):<16} "
            f"{stat('next_done_s'):<29} {stat('killed_request_done_s')}"
        )
    unplanned = [e for e in report["exits"] if not e["planned"]]
    print(
        f"   processes restarted by the soak: {len(report['exits'])} ({len(unplanned)} unplanned)"
    )
    print(f"   cluster restarts by run_cluster: {report['cluster_restarts']}")
    print(
        f"   slots: {report['slot_samples']} samples, highest {report['slots_highest']} (cap {CAP})"
    )
    print(f"   DAG runs: {report['dag_runs']}; instances at the end: {report['instances']}")
    for line in report["explained"]:
        print(f"   explained: {line}")
    for line in report["violations"]:
        print(f"   VIOLATION: {line}")
    print(f"   invariant violations: {len(report['violations'])}")


def soak(args, engine: PrivateDockerd, postgres: ThrowawayPostgres) -> dict:
    import _soak_checks as checks
    import django.db

    from containers.models import ContainerInstance
    from core.models import Counter as DbCounter
    from dags.models import DagRun

    owners, template, dag = fixtures(engine.url)
    seconds = args.seconds if args.seconds else args.minutes * 60
    with c.processes("soak") as procs:
        keeper = Keeper(procs, parts(args.env))
        keeper.launch_all()
        keeper.start()
        logs = {q: ClusterLog(procs.logdir / f"{q}-cluster.log") for q in ("create", "control")}
        wait_for(
            lambda: all(len(log.live_workers()) >= 2 for log in logs.values()),
            timeout=120, message="both clusters' workers up",
            describe=lambda: "\n".join(procs.tail(p) for p in procs.procs),
        )  # fmt: skip
        sampler = SlotSampler(CAP)
        traffic = Traffic(
            owners=owners, template=template, dag=dag, max_live=args.max_live,
            pace=args.pace, dag_every=args.dag_every,
        )  # fmt: skip
        faults = Faults(
            procs=procs, keeper=keeper, logs=logs, engine=engine, postgres=postgres,
            every=args.fault_every,
        )  # fmt: skip
        began = time.monotonic()
        print(f"   {now():%H:%M:%S} traffic and faults for {seconds:g}s", flush=True)
        violations, explained = [], []
        try:
            for thread in (sampler, traffic, faults):
                thread.start()
            struck = lambda: {f.kind for f in faults.faults}  # noqa: E731
            while time.monotonic() - began < seconds or (
                args.every_kind
                and set(FAULT_KINDS) - struck()
                and time.monotonic() - began < 2 * seconds
            ):
                time.sleep(0.2)
            faults.stopping.set()
            faults.join()
            traffic.stopping.set()
            traffic.join()
            print(
                f"   {now():%H:%M:%S} quiescing after {time.monotonic() - began:.0f}s", flush=True
            )
            django.db.connection.close()
            try:
                wait_for(checks.quiet, timeout=args.quiesce, interval=0.5, message="quiet",
                         describe=checks.unquiet)  # fmt: skip
            except AssertionError as error:
                violations.append(f"did not quiesce: {error}")
            print(f"   {now():%H:%M:%S} quiet; checking", flush=True)
        finally:
            for thread in (faults, traffic, sampler, keeper):
                thread.stopping.set()
            for thread in (faults, traffic, sampler, keeper):
                if thread.is_alive():
                    thread.join(timeout=30)
        with engine.client() as client:
            on_engine = checks.containers_by_instance(client, args.installation)
        for check, *more in (
            (checks.final_states, traffic.tracked, on_engine),
            (checks.rows_settled,),
            (checks.dag_runs_finished, traffic.dag_runs),
        ):
            bad, fine = check(*more)
            violations += bad
            explained += fine
        bad, explained = checks.only_engine_limits(
            explained, {fault.kind for fault in faults.faults}
        )
        violations += bad
        violations += checks.engine_matches(on_engine)
        violations += [f"concurrency cap exceeded: {line}" for line in sampler.over]
        for thread in (faults, traffic):
            if thread.error:
                violations.append(f"the soak's {thread.name} thread failed:\n{thread.error}")
        runs = Counter(
            DagRun.objects.filter(id__in=traffic.dag_runs).values_list("status", flat=True)
        )
        if not traffic.dag_runs:
            violations.append("no DAG run was started")
        return {
            "logs": str(procs.logdir),
            "date": now().isoformat(timespec="seconds"),
            "seconds": seconds,
            "requests": dict(traffic.requests),
            "refused": dict(traffic.refused),
            "lost": traffic.lost,
            "faults": dict(Counter(f.kind for f in faults.faults)),
            "faults_skipped": dict(faults.skipped),
            "recoveries": checks.recoveries(faults.faults),
            "exits": keeper.exits,
            "cluster_restarts": sum(
                DbCounter.objects.filter(name="cluster_restarted").values_list("count", flat=True)
            ),
            "slot_samples": sampler.samples,
            "slots_highest": sampler.highest,
            "dag_runs": dict(runs),
            "instances": dict(Counter(ContainerInstance.objects.values_list("status", flat=True))),
            "explained": explained,
            "violations": violations,
        }


def _stop_once(*_args) -> None:
    """The first SIGTERM (or a timed-out test) stops the soak; later ones are ignored so
    that nothing cuts its cleanup short (its processes, engine and database)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _stop_once)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--seconds", type=float, default=0, help="overrides --minutes")
    parser.add_argument("--fault-every", type=float, default=20, help="mean seconds between faults")
    parser.add_argument("--pace", type=float, default=0.5, help="mean seconds between requests")
    parser.add_argument("--dag-every", type=float, default=30)
    parser.add_argument("--max-live", type=int, default=16, help="live instances at the most")
    parser.add_argument("--quiesce", type=float, default=240, help="seconds to settle at the end")
    parser.add_argument("--fast", action="store_true", help="the test's short timeouts")
    parser.add_argument(
        "--every-kind", action="store_true",
        help="go on past the time (up to twice it) until every kind of fault struck once",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    random.seed(args.seed)
    args.installation = f"soak-{random.getrandbits(32):08x}"

    engine = PrivateDockerd("soak")
    postgres = ThrowawayPostgres()
    try:
        engine.start()
        engine.load_image(IMAGE)
        postgres.init()
        c.PG_PORT = postgres.port  # the header names this server, not the machine's
        c.header("chaos soak: traffic from four owners and DAG runs under random faults")
        print(f"   private dockerd (--live-restore) {engine.url}, PostgreSQL :{postgres.port}")
        env = c.app_env(
            postgres.url, settings="gobrave.settings",
            container_installation_id=args.installation,
            container_create_queue_max_concurrency=CAP, queue_create_workers=CAP + 1,
            **(FAST if args.fast else {}),
        )  # fmt: skip
        c.migrate(env)
        c.django_setup(env)
        args.env = env
        report = soak(args, engine, postgres)
    finally:
        # Whatever happened: the processes are stopped (c.processes), then these go.
        postgres.destroy()
        engine.destroy()
    report["machine"] = f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    figures(report)
    if report["violations"]:
        print(f"   the processes' logs are kept in {report['logs']}")
    else:
        shutil.rmtree(report["logs"], ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
