"""Fleet: gobrave driving several engines at once, beside the bare SDK on the same engines.

``--engines`` private ``dockerd``s (``tests/private_engine.py``: each in a network
namespace of its own, reached over a veth pair with mutual TLS; certificates made with
``openssl`` by ``tests/pki.py``), each holding the test image (copied in, never
pulled). The whole app runs as real processes, as bench/burst.py runs it (PostgreSQL
in its own bench database, gobrave's default connection pool, gunicorn serving
``gobrave.asgi``, one dispatcher, the ``create`` and ``control`` clusters, the monitor),
with one ``Runtime`` row per engine (TLS files) and ``create_queue_max_concurrency`` set
to ``--concurrency``. Figures:

1. **Burst throughput for 1, 2, 4, 8 engines**: N creates (``--creates``) POSTed at
   once for a template whose constraints match the first k engines, timed from the
   release to the last ``running`` (its history row); beside it, in the same run, the
   bare docker SDK creating and starting the same N containers (same image and command)
   on the same k engines from ``--concurrency`` threads (``burst.threads_run``), first to
   last start. Creates → running per second, and the ratio; each round's CPU seconds by
   part. Rounds alternate which goes first; between rounds every container is removed,
   the tables emptied and the monitor caught up. Each layout (``--layouts``) runs its
   own rounds: ``fleet`` keeps the engines (dockerd, containerd, the shims and what
   they start) on the upper half of the machine's CPUs and everything else on the rest,
   as engines on hosts of their own would be: the target (``TARGET_RATIO``) is judged
   there. ``shared`` lets every process run on every CPU: gobrave's own CPU then comes
   out of the engines' time, which measures the machine more than the fleet.
2. **Monitor lag** at the largest k: the N containers of its round are sent SIGTERM at
   once (they exit 0), and each instance's ``stopped`` history row is compared with the
   engine's own ``die`` event time (both on this machine's clock): p50/p99.
3. **Reconcile pass time** over every engine (one ``reconcile()`` pass in this process,
   with N instances running), and the same pass with one engine frozen (SIGSTOP on its
   dockerd), which costs the pass its ``reconcile_engine_timeout`` (``--freeze-timeout``).

    sudo .venv/bin/python bench/fleet.py [--rounds 2] [--engines 8] [--creates 32]
        [--concurrency 8] [--layouts fleet,shared]

Needs root (network namespaces), ``ip``, ``nsenter``, ``dockerd``, ``openssl``, and
``gobrave-test-busybox:latest`` on the machine's engine (scripts/test-engine.sh).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import _common as c
import docker
from admission import request, start_server, wait_ready
from burst import threads_run

from tests.pki import Pki
from tests.private_engine import TLS_PORT, PrivateDockerd, missing_tools
from tests.processes import descendants

IMAGE = "gobrave-test-busybox:latest"
# Exits 0 on SIGTERM (the monitor-lag step sends it); sleeps without a busy loop.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]
TARGET_RATIO = 0.9  # gobrave's throughput over the bare SDK's, at the most engines
TARGET_LAG_P99 = 1.0  # seconds, engine event -> state row
ROUNDS_OF = (1, 2, 4, 8)
# Where the engines run. In a fleet they are hosts of their own: nothing gobrave does
# takes CPU from them, and the bare SDK's client takes next to none. On one machine
# that is the engines (dockerd, containerd, the shims and what they start) kept on the
# upper half of its CPUs, gobrave, PostgreSQL and the bare SDK on the rest: the same
# engines, with the same CPU, on both sides. "shared": every process on every CPU, so
# gobrave's own work (~1.5 CPU s a round of 32 creates, its PostgreSQL's included)
# comes out of the engines' time, where the bare SDK's (~0.1) hardly does.
FLEET, SHARED = "fleet", "shared"
LAYOUTS = {
    FLEET: "engines on CPU(s) of their own (the target's layout)",
    SHARED: "engines, gobrave and PostgreSQL share every CPU",
}


# --- engines -----------------------------------------------------------------------------


def start_engines(count: int, pki: Pki) -> list[PrivateDockerd]:
    """``count`` private engines over mutual TLS, started in parallel (with a retry: a
    dockerd start now and then times out waiting for its containerd), image loaded."""
    engines = [PrivateDockerd(f"fleet{i}", tcp=True) for i in range(count)]
    pki.ca("ca")
    pki.signed("ca", "client", "extendedKeyUsage=clientAuth")
    for i, engine in enumerate(engines):
        pki.signed("ca", f"engine{i}", f"subjectAltName=IP:{engine.address}")
        engine.tls = (pki.cert("ca"), pki.cert(f"engine{i}"), pki.key(f"engine{i}"))

    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        list(pool.map(lambda engine: engine.start_with(IMAGE), engines))
    print(f"   {count} private engines (TLS, {TLS_PORT}) up in {time.monotonic() - began:.1f} s")
    return engines


def engines_pin(engines: list[PrivateDockerd], cpus: set[int]) -> None:
    """Keep each engine (its dockerd, containerd and shims, and whatever they start from
    now on: the affinity is inherited) on ``cpus``."""
    for engine in engines:
        for pid in [engine.process.pid, *descendants(engine.process.pid)]:
            for task in Path(f"/proc/{pid}/task").glob("*"):  # every thread of it
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.sched_setaffinity(int(task.name), cpus)


class _APIClient(docker.APIClient):
    """The SDK's client, never reading the environment: ``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE`` would replace the engine's CA (``requests.Session`` sets
    ``trust_env`` in its constructor, before the version negotiation)."""

    trust_env = property(lambda self: False, lambda self, value: None)


def tls_client(engine: PrivateDockerd, pki: Pki) -> docker.APIClient:
    """The bare SDK on the engine's TLS address, as gobrave reaches it."""
    tls = docker.tls.TLSConfig(
        client_cert=(pki.cert("client"), pki.key("client")), ca_cert=pki.cert("ca"), verify=True
    )
    return _APIClient(base_url=engine.url, tls=tls, version="auto", timeout=60)


# --- fixtures ----------------------------------------------------------------------------


def fixtures(engines: list[PrivateDockerd], pki: Pki) -> str:
    """A user and its token, a runtime per engine (labelled ``k<K>: yes`` for each round
    of K engines it belongs to), a template per round."""
    from django.contrib.auth.models import User

    from containers.models import ContainerTemplate, Runtime
    from tenants.services import api_token_create

    Runtime.objects.all().delete()  # the migration's "local" row is the machine's engine
    for i, engine in enumerate(engines):
        Runtime.objects.create(
            name=f"fleet{i}",
            driver="docker",
            base_url=engine.url,
            tls_ca_cert=pki.cert("ca"),
            tls_client_cert=pki.cert("client"),
            tls_client_key=pki.key("client"),
            labels={f"k{k}": "yes" for k in ROUNDS_OF if i < k},
        )
    for k in ROUNDS_OF:
        ContainerTemplate.objects.create(
            name=f"fleet-k{k}",
            image=IMAGE,
            command=COMMAND,
            pull_policy="never",
            constraints={f"k{k}": "yes"},
        )
    user = User.objects.create_user("bench", password="bench-password-1")
    return api_token_create(user=user, name="bench").key


# --- one round ---------------------------------------------------------------------------


def bare_round(clients: list, bench_id: str, n: int, threads: int, tag: str) -> float:
    """N create+starts spread over ``clients`` (round robin) by ``threads`` threads
    (``burst.threads_run``, the burst bench's runner); seconds from the first to the last
    start."""

    def one(i: int) -> None:
        client = clients[i % len(clients)]
        container = client.create_container(
            IMAGE,
            command=COMMAND,
            name=f"{bench_id}-bare-{tag}-{i}",
            labels={"io.gobrave.installation": bench_id},
        )
        client.start(container["Id"])

    elapsed, took = threads_run(n, threads, one)
    print(
        f"        bare create+start per container p50 {statistics.median(took) * 1000:.0f} ms,"
        f" max {max(took) * 1000:.0f} ms"
    )
    return elapsed


def gobrave_round(port: int, token: str, k: int, n: int, procs, timeout: float) -> dict:
    from containers.models import ContainerEvent, ContainerInstance

    barrier = threading.Barrier(n + 1)
    answers: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def post() -> None:
        barrier.wait()
        body = {"template": f"fleet-k{k}"}
        status, (_, data) = request(port, token, "POST", "/api/containers/", body)
        with lock:
            answers.append((status, data))

    clients = [threading.Thread(target=post) for _ in range(n)]
    for client in clients:
        client.start()
    t0 = time.time()
    barrier.wait()
    for client in clients:
        client.join()
    answered = time.time() - t0  # the last 202
    refused = [(status, data[:200]) for status, data in answers if status != 202]
    if refused:
        raise RuntimeError(f"{len(refused)} creates refused, e.g. {refused[0]}")
    ids = [json.loads(data)["id"] for _, data in answers]
    running = ContainerEvent.objects.filter(instance_id__in=ids, to_status="running")

    def all_running() -> bool:
        procs.check()
        failed = ContainerInstance.objects.filter(pk__in=ids, status="failed").first()
        if failed is not None:
            raise RuntimeError(f"instance {failed.pk} failed: {failed.status_reason}")
        return running.count() >= n

    c.wait_until(all_running, timeout=timeout, interval=0.2, what=f"{n} instances running")
    last = max(running.values_list("created_at", flat=True))
    phases = _phases(ids, t0, answered)
    placed = ContainerInstance.objects.filter(pk__in=ids).values_list("runtime__name", flat=True)
    per_engine: dict[str, int] = {}
    for name in placed:
        per_engine[name] = per_engine.get(name, 0) + 1
    return {
        "total": last.timestamp() - t0,
        "ids": ids,
        "engines": len(per_engine),
        "per_engine": dict(sorted(per_engine.items())),
        "phases": phases,
    }


def _phases(ids: list[str], t0: float, answered: float) -> str:
    """Where a round's time went, from each instance's history: the last 202 after the
    release; accepted -> ``creating`` (waiting for a worker and its slot) and ``creating``
    -> ``running`` (the worker's engine calls: create, start, inspect), p50 / max."""
    from containers.models import ContainerEvent

    at: dict[tuple[str, str], float] = {}
    for instance_id, status, when in ContainerEvent.objects.filter(
        instance_id__in=ids, to_status__in=["pending", "creating", "running"]
    ).values_list("instance_id", "to_status", "created_at"):
        at.setdefault((str(instance_id), status), when.timestamp())
    waited = [at[(i, "creating")] - at[(i, "pending")] for i in ids if (i, "pending") in at]
    worked = [at[(i, "running")] - at[(i, "creating")] for i in ids if (i, "creating") in at]
    first = min((at[(i, "creating")] for i in ids if (i, "creating") in at), default=t0)

    def p50_max(values: list[float]) -> str:
        if not values:
            return "-"
        return f"{statistics.median(values) * 1000:.0f}/{max(values) * 1000:.0f} ms"

    return (
        f"last 202 at {answered:.2f} s, first creating at {first - t0:.2f} s; "
        f"accepted->creating {p50_max(waited)}, creating->running {p50_max(worked)} (p50/max)"
    )


def reset(bench_id: str, clients: list, since: float) -> None:
    """Empty the tables, remove every bench container on every engine, wait until the
    monitor has applied every event so far and the machine is quiet; outside timings."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE containers_containerinstance, outbox_outboxevent, django_q_ormq CASCADE"
        )
    remove_ours(bench_id, clients)
    monitor_settle(bench_id, clients, since)
    c.wait_quiet(busy_below=0.3, timeout=10)


def remove_ours(bench_id: str, clients: list) -> None:
    label = f"io.gobrave.installation={bench_id}"

    def clean(client) -> None:
        # Another remover may be at it too (gobrave's own, for a row just emptied): its
        # "removal already in progress" and a container gone meanwhile are both fine, and
        # the engine is asked again until none of ours is left.
        def ours() -> list[dict]:
            return client.containers(all=True, filters={"label": label})

        for container in ours():
            try:
                client.remove_container(container["Id"], force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
        c.wait_until(lambda: not ours(), timeout=60, interval=0.1, what="our containers gone")

    with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(clean, clients))


def engine_events(client, bench_id: str, since: float, actions: list[str]) -> list[dict]:
    """The engine's own events of our containers since ``since`` (a Unix time), to now."""
    return list(
        client.events(
            since=int(since),
            until=f"{time.time() + 0.001:.6f}",
            filters={
                "type": "container",
                "label": f"io.gobrave.installation={bench_id}",
                "event": actions,
            },
            decode=True,
        )
    )


def monitor_settle(bench_id: str, clients: list, since: float, timeout: float = 120) -> None:
    """Wait until each engine's cursor reached the last event it reported since ``since``."""
    from containers.engines.docker import EVENT_ACTIONS
    from containers.models import MonitorCursor

    for i, client in enumerate(clients):
        events = engine_events(client, bench_id, since, sorted(EVENT_ACTIONS))
        last = max((event["timeNano"] for event in events), default=0)
        if not last:
            continue
        rows = MonitorCursor.objects.filter(runtime__name=f"fleet{i}")

        def caught_up(rows=rows, last=last) -> bool:  # a Docker cursor is its time as text
            return int(rows.values_list("position", flat=True).first() or 0) >= last

        try:
            c.wait_until(caught_up, timeout=timeout, interval=0.05, what=f"fleet{i}'s cursor")
        except TimeoutError:
            cursor = rows.values("position", "seen", "updated_at").first()
            late = [e for e in events if e["timeNano"] > int((cursor or {}).get("position") or 0)]
            print(f"   fleet{i}: cursor {cursor}, last event {last}, {len(late)} event(s) past it:")
            for event in late[:10]:
                print(f"     {event['timeNano']} {event['Action']} {event['id'][:12]}")
            raise


# --- monitor lag and the reconcile pass -------------------------------------------------------


def monitor_lag(bench_id: str, clients: list, ids: list[str], timeout: float) -> dict:
    """SIGTERM every container of ``ids`` at once (one thread per engine); each
    instance's ``stopped`` row against the engine's ``die`` event."""
    from containers.models import ContainerEvent, ContainerInstance

    by_engine: dict[int, list[str]] = {}
    for instance_id, runtime in ContainerInstance.objects.filter(pk__in=ids).values_list(
        "pk", "runtime__name"
    ):
        by_engine.setdefault(int(runtime.removeprefix("fleet")), []).append(f"gb-{instance_id}")
    since = time.time()

    def stop_all(i: int) -> None:
        for name in by_engine[i]:
            clients[i].kill(name, signal="SIGTERM")

    with concurrent.futures.ThreadPoolExecutor(len(by_engine)) as pool:
        list(pool.map(stop_all, by_engine))
    stopped = ContainerEvent.objects.filter(instance_id__in=ids, to_status="stopped")
    c.wait_until(
        lambda: stopped.count() >= len(ids), timeout=timeout, interval=0.2, what="every exit"
    )
    died = {}
    for i in by_engine:
        for event in engine_events(clients[i], bench_id, since, ["die"]):
            died[event["Actor"]["Attributes"]["name"]] = event["timeNano"] / 1e9
    lags, actors = [], {}
    for instance_id, at, actor in stopped.values_list("instance_id", "created_at", "actor"):
        lags.append(at.timestamp() - died[f"gb-{instance_id}"])
        actors[actor] = actors.get(actor, 0) + 1
    return {"lags": lags, "actors": actors}


def reconcile_pass(bench_id: str, *, engine_timeout: float | None = None) -> tuple[float, str]:
    from containers.execution.reconciler import reconcile

    t0 = time.perf_counter()
    report = reconcile(installation=bench_id, engine_timeout=engine_timeout)
    return time.perf_counter() - t0, str(report)


# --- main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=8)
    parser.add_argument("--creates", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8, help="slots; bare threads")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per engine count")
    parser.add_argument("--timeout", type=float, default=180, help="max seconds per round")
    parser.add_argument("--freeze-timeout", type=float, default=2.0)
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--layouts",
        default=f"{FLEET},{SHARED}",
        help=f"which layouts to run, in order: {FLEET} (the target's), {SHARED}",
    )
    args = parser.parse_args()
    if reason := missing_tools("openssl"):
        raise SystemExit(f"fleet bench: {reason}")
    counts = [k for k in ROUNDS_OF if k <= args.engines]
    layouts = args.layouts.split(",")
    if not set(layouts) <= set(LAYOUTS) or not layouts:
        raise SystemExit(f"fleet bench: --layouts takes {FLEET} and/or {SHARED}")
    cores = sorted(os.sched_getaffinity(0))
    if FLEET in layouts and len(cores) < 2:
        raise SystemExit(
            f"fleet bench: the {FLEET!r} layout needs 2 CPUs or more; on this machine run"
            f" --layouts {SHARED} (the target is not judged there)"
        )
    engine_cpus = set(cores[len(cores) // 2 :])  # the upper half (1 of 2)
    bench_id = f"gbfleet-{os.getpid()}-{int(time.time())}"
    docker.from_env().images.get(IMAGE)  # present, never pulled

    c.header("fleet: N creates at once over 1..8 private engines (mutual TLS) -> all running")
    print(f"   load average at start: {load()} on {os.cpu_count()} cores")
    pki = Pki(Path(tempfile.mkdtemp(prefix="gobrave-fleet-pki-")))
    engines: list[PrivateDockerd] = []
    try:
        engines = start_engines(args.engines, pki)
        clients = [tls_client(engine, pki) for engine in engines]
        print(
            f"   docker {clients[0].version()['Version']}, bench id {bench_id}, "
            f"{args.creates} creates per round, create_queue_max_concurrency "
            f"{args.concurrency} (bare: {args.concurrency} threads), {args.rounds} round(s)"
        )
        with c.bench_database("fleet", keep=args.keep_db) as url:
            config = {
                **c.NO_OWNER_QUOTAS,
                "container_installation_id": bench_id,
                "container_create_queue_max_concurrency": args.concurrency,
                "container_create_queue_max_pending": max(50, 2 * args.creates),
                "container_reconcile_interval": 600,  # the lag is the events' alone
            }
            c.django_setup(c.app_env(url, settings="gobrave.settings", **config))
            token = fixtures(engines, pki)
            env = c.app_env(url, settings="gobrave.settings", pool=None, **config)
            with c.processes("fleet") as procs:
                port = start_server(
                    procs, "web", "gobrave.asgi:application", env,
                    SimpleNamespace(workers=2, threads=4),
                )  # fmt: skip
                procs.dispatcher(env)
                procs.cluster("create", env)
                procs.cluster("control", env)
                monitor = procs.manage("monitor", "run_monitor", env=env)
                wait_ready(procs, port, token)
                time.sleep(2)  # clusters up
                since = time.time()
                gobrave_round(port, token, counts[-1], counts[-1], procs, args.timeout)  # warm-up
                reset(bench_id, clients, since)
                ratios: dict[str, float] = {}
                run = SimpleNamespace(
                    procs=procs, port=port, token=token, clients=clients, bench_id=bench_id,
                    counts=counts, args=args,
                )  # fmt: skip
                for layout in layouts:
                    engines_pin(engines, engine_cpus if layout == FLEET else set(cores))
                    print(f"   -- layout {layout!r}: {LAYOUTS[layout]}")
                    results, last_ids = layout_rounds(run, layout, last=layout == layouts[-1])
                    ratios[layout] = throughput_report(results, counts, args, layout)
                if SHARED in ratios:
                    print(
                        f"   at {counts[-1]} engines, every CPU shared: ratio "
                        f"{ratios[SHARED]:.2f} (gobrave's own CPU comes out of the engines')"
                    )
                if FLEET in ratios:
                    ratio = ratios[FLEET]
                    print(
                        f"   at {counts[-1]} engines, engines on CPU(s) of their own: ratio "
                        f"{ratio:.2f} (target >= {TARGET_RATIO}: "
                        f"{c.verdict(ratio >= TARGET_RATIO)})"
                    )
                # The reconcile pass over every engine, its N instances running.
                c.wait_quiet(busy_below=0.3, timeout=10)
                took, report = reconcile_pass(bench_id)
                print(
                    f"   reconcile pass over {len(engines)} engines: {took * 1000:.0f} ms "
                    f"({report})"
                )
                frozen = engines[-1]
                os.kill(frozen.process.pid, signal.SIGSTOP)
                try:
                    took, report = reconcile_pass(bench_id, engine_timeout=args.freeze_timeout)
                finally:
                    os.kill(frozen.process.pid, signal.SIGCONT)
                print(
                    f"   the same with one engine frozen (SIGSTOP), reconcile_engine_timeout "
                    f"{args.freeze_timeout:g} s: {took * 1000:.0f} ms"
                )
                c.wait_until(frozen.answers, timeout=60, what="the frozen engine back")
                # Monitor lag: every container of the last round exits at once.
                lag = monitor_lag(bench_id, clients, last_ids, args.timeout)
                lags = lag["lags"]
                p99 = c.percentile(lags, 99)
                print(
                    f"   monitor lag at {counts[-1]} engines (engine die -> stopped row), "
                    f"{c.summary_ms(lags)}; applied by {lag['actors']}"
                )
                print(
                    f"   lag p99 {p99 * 1000:.0f} ms (target <= {TARGET_LAG_P99 * 1000:.0f} ms: "
                    f"{c.verdict(p99 <= TARGET_LAG_P99)}); monitor threads "
                    f"{len(os.listdir(f'/proc/{monitor.pid}/task'))}, connections "
                    f"{monitor_connections()}"
                )
            remove_ours(bench_id, clients)
    finally:
        with concurrent.futures.ThreadPoolExecutor(max(1, len(engines))) as pool:
            list(pool.map(lambda engine: engine.destroy(), engines))
        shutil.rmtree(pki.directory, ignore_errors=True)
    return 0


def layout_rounds(run: SimpleNamespace, layout: str, *, last: bool) -> tuple[dict, list[str]]:
    """One layout's rounds: for each round and engine count, the bare SDK's and gobrave's
    (which goes first alternates), each with its CPU by part, the world reset after it.
    In the ``last`` layout the very last gobrave round goes last and its containers stay
    (for the lag and reconcile steps). Returns the seconds of each side per engine count,
    and the ids of that last gobrave round's instances."""
    args, counts = run.args, run.counts
    results = {k: {"bare": [], "ours": []} for k in counts}
    last_ids: list[str] = []
    for r in range(args.rounds):
        for k in counts:
            final = last and k == counts[-1] and r == args.rounds - 1
            flip = (r + counts.index(k)) % 2 and not final
            for which in ("gobrave", "bare") if flip else ("bare", "gobrave"):
                since = time.time()
                before = c.cpu_by_part(run.procs)
                if which == "bare":
                    took = bare_round(
                        run.clients[:k], run.bench_id, args.creates, args.concurrency,
                        f"{layout}-{r}-{k}",
                    )  # fmt: skip
                    results[k]["bare"].append(took)
                    print(
                        f"   {k} engine(s), round {r + 1}: bare    {took:6.2f} s  (load {load()})"
                    )
                else:
                    out = gobrave_round(
                        run.port, run.token, k, args.creates, run.procs, args.timeout
                    )
                    results[k]["ours"].append(out["total"])
                    print(
                        f"   {k} engine(s), round {r + 1}: gobrave {out['total']:6.2f} s (on "
                        f"{out['engines']} engine(s): {spread(out['per_engine'])})  (load {load()})"
                    )
                    print(f"        {out['phases']}")
                    last_ids = out["ids"]
                # The bare side is this process ("bench"); "postgres" and "engine" count
                # every such process on the machine.
                print(f"        CPU seconds: {c.cpu_spent(before, c.cpu_by_part(run.procs))}")
                if final and which == "gobrave":
                    break
                reset(run.bench_id, run.clients, since)
    return results, last_ids


def throughput_report(results: dict, counts: list[int], args, layout: str) -> float:
    """Print each engine count's creates -> running per second, gobrave's and the bare
    SDK's (median of the rounds), and their ratio; returns the ratio at the most engines."""
    print(f"   throughput ({layout}: creates -> running per second), median of {args.rounds}:")
    ratio = 0.0
    for k in counts:
        bare = args.creates / statistics.median(results[k]["bare"])
        ours = args.creates / statistics.median(results[k]["ours"])
        ratio = ours / bare
        print(
            f"     {k} engine(s): gobrave {ours:5.1f}/s, bare SDK {bare:5.1f}/s, ratio {ratio:.2f}"
        )
    return ratio


def load() -> str:
    """The machine's load average (1, 5, 15 min): the bench shares its cores."""
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def spread(per_engine: dict[str, int]) -> str:
    """Creates placed per engine, e.g. ``4 4 4 4 4 4 4 4``."""
    return " ".join(str(count) for count in per_engine.values())


def monitor_connections() -> int:
    with c.admin_connect() as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'gobrave-bench-monitor'"
        ).fetchone()[0]


if __name__ == "__main__":
    sys.exit(main())
