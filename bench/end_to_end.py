"""End to end: POST /api/containers/ to ``running`` on the real Docker Engine.

The whole app runs as the README recommends for production: PostgreSQL (its own bench
database), the ORM broker, config.yml as shipped but without per-owner quotas (its one user
keeps every instance it makes; ``--config`` changes keys), gobrave's default connection
pool; the web server as production runs it (gunicorn with uvicorn's ASGI workers; ``--server
wsgi`` for the threaded WSGI server it replaced), one dispatcher, the ``create`` and
``control`` clusters and the monitor. One container at a time (so this is latency, not
queueing): the bench notes the wall clock, POSTs a create of a busybox template (``gobrave-
test-busybox:latest``, pull_policy never, ``sleep 600``) on an HTTP connection it keeps open
(as the SDK keeps its own), and reads the time of the instance's ``running`` transition from
its history, once the engine said ``start``. Interleaved with each sample, the docker SDK's
bare ``containers.create()`` + ``start()`` of the same image and command is timed. Every
container carries ``io.gobrave.installation=<bench id>`` and all are removed at the end.

    .venv/bin/python bench/end_to_end.py [--samples 50] [--config NAME:key=value,...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import os
import statistics
import sys
import time
from types import SimpleNamespace

import _common as c
import docker
from admission import request, start_server, wait_ready
from relay_throughput import parse_config

IMAGE = "gobrave-test-busybox:latest"
COMMAND = ["sleep", "600"]
TARGET_RATIO = 1.10  # p50 of gobrave over the p50 of bare docker
TARGET_P95 = 1.25  # the same for p95
CONFIGS = {"default": {}}


def fixtures() -> str:
    from django.contrib.auth.models import User

    from containers.models import ContainerTemplate
    from tenants.services import api_token_create

    user = User.objects.create_user("bench", password="bench-password-1")
    ContainerTemplate.objects.create(
        name="bench",
        image=IMAGE,
        command=COMMAND,
        pull_policy="never",
        constraints={"engine": "docker"},
    )
    return api_token_create(user=user, name="bench").key


def bare_sample(client, bench_id: str, i: int, tag: str, engine=None, split=None) -> float:
    t0, wall = time.perf_counter(), time.time()
    name = f"{bench_id}-bare-{tag}-{i}"
    container = client.containers.create(
        IMAGE,
        command=COMMAND,
        name=name,
        labels={"io.gobrave.installation": bench_id},
        detach=True,
    )
    container.start()
    took = time.perf_counter() - t0
    if engine is not None and split is not None:
        created, started = engine.of(name, "create"), engine.of(name, "start")
        split.append((created - wall, started - created, wall + took - started))
    return took


class Client:
    """One HTTP connection kept open between requests, as the docker SDK keeps its own
    (a program that creates many containers would too); made again if the server closed
    it while idle (gunicorn's keep-alive timeout)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, token: str, path: str, body: dict):
        try:
            return request(self.port, token, "POST", path, body, conn=self.conn)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            self.conn.close()  # http.client opens a new socket for the next request
            return request(self.port, token, "POST", path, body, conn=self.conn)


def gobrave_sample(client: Client, token: str, procs, engine=None) -> dict:
    from containers.models import ContainerEvent
    from outbox.models import OutboxEvent

    t0 = time.time()
    status, (_, body) = client.post(token, "/api/containers/", {"template": "bench"})
    answered = time.time()
    if status != 202:
        raise RuntimeError(f"create answered {status}: {body[:300]!r}")
    import json

    instance_id = json.loads(body)["id"]

    def running():
        procs.check()
        return (
            ContainerEvent.objects.filter(instance_id=instance_id, to_status="running")
            .values_list("created_at", flat=True)
            .first()
        )

    # The time is read from the history row (the worker's clock), not from when this loop
    # sees it: a slow poll loses no precision, and a 5 ms one took CPU from the 2 cores
    # the app under test shares with the engine (the bare baseline has no observer). With
    # the engine's events at hand the database is asked only once the engine has said
    # "start" (a poll every 50 ms all along was ~5 queries per create, run on the cores
    # the engine was creating on).
    if engine is not None:
        engine.of(f"gb-{instance_id}", "start", timeout=60)
    interval = 0.005 if engine is not None else 0.05
    ran = c.wait_until(running, timeout=60, interval=interval, what=f"{instance_id} running")
    creating = (
        ContainerEvent.objects.filter(instance_id=instance_id, to_status="creating")
        .values_list("created_at", flat=True)
        .first()
    )
    row = OutboxEvent.objects.get(aggregate_id=instance_id, kind="ContainerCreateRequest")
    sample = {
        "total": ran.timestamp() - t0,
        "api": answered - t0,
        "to_row": row.created_at.timestamp() - t0,
        "handoff": row.started_at.timestamp() - row.created_at.timestamp(),
        "to_creating": creating.timestamp() - row.started_at.timestamp(),
        "engine": ran.timestamp() - creating.timestamp(),
    }
    if engine is not None:  # the engine's own clock: its create and start events
        name = f"gb-{instance_id}"
        created, started = engine.of(name, "create"), engine.of(name, "start")
        sample["to_engine_create"] = created - creating.timestamp()
        sample["engine_create_start"] = started - created
        sample["after_start"] = ran.timestamp() - started
    return sample


def cleanup(bench_id: str, timeout: float = 120) -> tuple[int, int]:
    """Remove every container labelled ``bench_id``; retries while the engine restarts."""
    removed, deadline, label = 0, time.monotonic() + timeout, f"io.gobrave.installation={bench_id}"
    while True:
        try:
            client = docker.from_env()
            containers = client.containers.list(all=True, filters={"label": label})
            if not containers:
                return removed, 0
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda ct: ct.remove(force=True), containers))
            removed += len(containers)
        except docker.errors.NotFound:
            continue
        except (docker.errors.DockerException, OSError) as exc:
            if time.monotonic() > deadline:
                print(f"   cleanup gave up: {exc}")
                return removed, -1
            print(f"   (engine unavailable during cleanup: {exc}; retrying)")
            time.sleep(2)


def docker_bench() -> tuple[str, docker.DockerClient]:
    """A bench id to label this run's containers with, and a client of an engine that has
    ``IMAGE`` (never pulled: the bench fails at once without it)."""
    bench_id = f"gbbench-{os.getpid()}-{int(time.time())}"
    client = docker.from_env()
    client.images.get(IMAGE)  # present, never pulled
    return bench_id, client


def cleanup_reported(bench_id: str) -> None:
    """``cleanup``, then say how many containers it removed and how many are left."""
    removed, left = cleanup(bench_id)
    print(f"   removed {removed} containers labelled {bench_id}; left: {left}")


def run_config(name, overrides, url, token, bench_id, client, args) -> tuple[list, list]:
    env = c.app_env(
        url,
        settings="gobrave.settings",
        pool=None,
        container_installation_id=bench_id,
        **{**c.NO_OWNER_QUOTAS, **overrides},
    )
    server = SimpleNamespace(workers=2, threads=4)
    with c.processes(f"e2e-{name}") as procs:
        port = start_server(procs, "web", f"gobrave.{args.server}:application", env, server)
        procs.dispatcher(env)
        procs.cluster("create", env)
        procs.cluster("control", env)
        procs.manage("monitor", "run_monitor", env=env)
        wait_ready(procs, port, token)
        time.sleep(2)  # clusters up
        api = Client(port)
        for i in range(2):  # warm-up, not counted
            gobrave_sample(api, token, procs)
            bare_sample(client, bench_id, i, f"{name}-warm")
        bare, ours, split = [], [], []
        engine = c.EngineEvents(client)
        try:
            deadline = time.monotonic() + args.max_seconds
            for i in range(args.samples):
                if time.monotonic() > deadline:
                    print(f"  (stopped after {i} samples: {args.max_seconds:g}s bound)")
                    break
                bare.append(bare_sample(client, bench_id, i, name, engine, split))
                ours.append(gobrave_sample(api, token, procs, engine))
        finally:
            engine.close()
    return bare, ours, split


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--max-seconds", type=float, default=100, help="bound per config")
    parser.add_argument("--config", action="append", help="NAME:section_key=value,...")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--server", choices=["asgi", "wsgi"], default="asgi", help="the web server's interface"
    )
    args = parser.parse_args()
    configs = dict(map(parse_config, args.config)) if args.config else CONFIGS
    bench_id, client = docker_bench()

    c.header("end to end: POST /api/containers/ -> running, real Docker Engine")
    print(f"   docker {client.version()['Version']}, bench id {bench_id}, {args.samples} samples")
    try:
        with c.bench_database("e2e", keep=args.keep_db) as url:
            c.django_setup(c.app_env(url, settings="gobrave.settings"))
            token = fixtures()
            for name, overrides in configs.items():
                print(f"config {name}: {overrides or 'config.yml as shipped'}, no per-owner quotas")
                bare, ours, split = run_config(name, overrides, url, token, bench_id, client, args)
                total = [s["total"] for s in ours]
                print(f"   bare docker create+start: {c.summary_ms(bare)}")
                print(f"   gobrave API -> running  : {c.summary_ms(total)}")
                for part, what in (
                    ("api", "POST answered (202)"),
                    ("to_row", "POST sent -> outbox row written (before its commit)"),
                    ("handoff", "outbox row written -> worker begins (dispatcher, broker)"),
                    ("to_creating", "worker begins -> creating (capacity gate)"),
                    ("engine", "creating -> running (engine calls, inspect)"),
                    ("to_engine_create", "  creating -> the engine's create event"),
                    ("engine_create_start", "  the engine's create -> start events"),
                    ("after_start", "  the engine's start event -> running"),
                ):
                    values = [s[part] for s in ours]
                    print(
                        f"     {what:58s} p50 {c.percentile(values, 50) * 1000:6.1f} ms, "
                        f"mean {statistics.fmean(values) * 1000:6.1f} ms"
                    )
                for n, what in enumerate(
                    (
                        "bare: the call -> the engine's create event",
                        "bare: the engine's create -> start events",
                        "bare: the engine's start event -> start returned",
                    )
                ):
                    values = [parts[n] for parts in split]
                    print(
                        f"     {what:58s} p50 {c.percentile(values, 50) * 1000:6.1f} ms, "
                        f"mean {statistics.fmean(values) * 1000:6.1f} ms"
                    )
                r50 = c.percentile(total, 50) / c.percentile(bare, 50)
                r95 = c.percentile(total, 95) / c.percentile(bare, 95)
                print(
                    f"   ratio p50 {r50:.2f}, p95 {r95:.2f} (target p50 <= {TARGET_RATIO}: "
                    f"{c.verdict(r50 <= TARGET_RATIO)}; p95 <= {TARGET_P95}: "
                    f"{c.verdict(r95 <= TARGET_P95)})"
                )
    finally:
        cleanup_reported(bench_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
