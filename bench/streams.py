"""Streams: the API's latency and the server's memory with 0, 50, 200 and 500 followers.

The web server as ``make run`` starts it (gunicorn, 2 uvicorn ASGI workers, the default
pool of 10 database connections per process, config.yml as shipped but for the stream
limit per user, lifted so one bench user may hold every follower), PostgreSQL (its own
bench database) and the real Docker Engine: ``--containers`` busybox containers that
print a line every 0.5 s, labelled with the bench id and removed at the end. Followers
are ``GET /api/containers/<id>/logs/?follow=1`` spread over those containers, each on its
own connection, read by an asyncio loop in a child process of the bench as fast as the
output comes.

At each level, with every follower connected and reading: ``--samples`` sequential
``GET /api/containers/?limit=20`` on one kept-alive connection (p50, p95; the warm-up
made at least 20 instances, so every level lists a page of 20), then ``--creates``
``POST /api/containers/`` (fake runtime: the 202's latency, nothing run), and the server's
resident memory (gunicorn's main and workers, summed) against the level with none. The
figures with no follower are the peer of every other level, measured in the same run.

    .venv/bin/python bench/streams.py [--levels 0,50,200,500] [--samples 200]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import sys
import tempfile
import time
import uuid
from types import SimpleNamespace

import _common as c
import docker
from admission import request, start_server, wait_ready

IMAGE = "gobrave-test-busybox:latest"
PRINTS = 'i=0; while true; do echo "bench line $i"; i=$((i+1)); sleep {every}; done'
# One page of a fixed size: the creates each level makes must not make the page longer.
LIST_ROWS = 20
LIST = f"/api/containers/?limit={LIST_ROWS}"
TARGET_P95_RATIO = 1.5  # /api/containers/ p95 with 200 followers over idle
TARGET_KIB_PER_FOLLOWER = 256


class Followers:
    """Follow connections held open by an asyncio loop in a child process of this bench
    (so that reading them costs the measuring thread here no GIL)."""

    def __init__(self, port: int, token: str) -> None:
        context = multiprocessing.get_context("fork")
        self.pipe, child = context.Pipe()
        self.process = context.Process(target=_followers_main, args=(child, port, token))
        self.process.start()
        self.failed = 0

    def add(self, instance_ids: list[str], count: int) -> None:
        self.pipe.send(("add", instance_ids, count))
        if not self.pipe.poll(300):
            raise TimeoutError("the followers did not all start within 300 s")
        self.failed = self.pipe.recv()

    def drop(self) -> None:
        """Close every follower (and wait until they are closed)."""
        self.pipe.send(("drop",))
        self.pipe.recv()

    def close(self) -> None:
        self.pipe.send(("close",))
        self.process.join(60)


def _followers_main(pipe, port: int, token: str) -> None:
    failed = 0

    async def follow(instance_id: str, ready: asyncio.Event) -> None:
        nonlocal failed
        writer = None
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
            writer.write(
                f"GET /api/containers/{instance_id}/logs/?follow=1&tail=1 HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nAuthorization: Token {token}\r\n\r\n".encode()
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
            await asyncio.wait_for(reader.read(65536), 60)
            ready.set()
            while await reader.read(65536):
                pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - counted and said
            failed += 1
            if failed <= 3:
                print(f"   follower failed: {exc!r}", flush=True)
            ready.set()
        finally:
            if writer is not None:
                writer.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        tasks = []
        while True:
            command = await loop.run_in_executor(None, pipe.recv)
            if command[0] in ("close", "drop"):
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                tasks.clear()
                if command[0] == "close":
                    return
                pipe.send(failed)
                continue
            _, ids, count = command
            events = []
            for i in range(count):
                ready = asyncio.Event()
                events.append(ready)
                tasks.append(asyncio.ensure_future(follow(ids[i % len(ids)], ready)))
            await asyncio.gather(*(event.wait() for event in events))
            pipe.send(failed)

    asyncio.run(main())


def server_rss_kib(procs) -> int:
    main = procs.procs["web"].pid
    return sum(c.rss_kib(pid) for pid in [main, *_children(main)])


def _children(pid: int) -> list[int]:
    from pathlib import Path

    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def measure(port: int, token: str, args) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    lists, creates, timeouts = [], [], 0
    for _ in range(args.samples):
        t0 = time.perf_counter()
        try:
            status, _ = request(port, token, "GET", LIST, conn=conn)
        except (TimeoutError, OSError):
            timeouts += 1
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        lists.append(time.perf_counter() - t0)
        assert status == 200, status
    for _ in range(args.creates):
        t0 = time.perf_counter()
        status, (_, body) = request(
            port, token, "POST", "/api/containers/", {"template": "bench"}, conn=conn
        )
        creates.append(time.perf_counter() - t0)
        assert status == 202, (status, body[:300])
    return {"lists": lists, "creates": creates, "timeouts": timeouts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="0,50,200,500")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--containers", type=int, default=10)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between lines")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    client = docker.from_env()
    bench_id = f"gbbench-streams-{uuid.uuid4().hex[:8]}"
    c.header("streams: the API with 0..500 followers of printing containers")
    print(f"   docker {client.version()['Version']}, levels {levels}, {args.containers} containers")
    containers = [
        client.containers.run(
            IMAGE,
            ["sh", "-c", PRINTS.format(every=args.every)],
            detach=True,
            labels={"io.gobrave.bench": bench_id},
        )
        for _ in range(args.containers)
    ]
    try:
        with c.bench_database("streams") as url:
            c.django_setup(c.app_env(url, settings="gobrave.settings"))
            from containers.models import ContainerInstance, Runtime
            from tenants.services import api_token_create

            owner, template = c.fake_fixtures(tempfile.mkdtemp(prefix="gobrave-bench-fake-"))
            token = api_token_create(user=owner, name="bench").key
            docker_runtime = Runtime.objects.get(name="local")
            ids = []
            for n, container in enumerate(containers):
                instance = ContainerInstance.objects.create(
                    name=f"printer{n}",
                    owner=owner,
                    template=template,
                    runtime=docker_runtime,
                    status="running",
                    container_id=container.id,
                    spec={"name": f"printer{n}", "image": IMAGE, "env": {}},
                )
                ids.append(str(instance.pk))
            env = c.app_env(
                url,
                settings="gobrave.settings",
                pool=None,
                container_create_queue_max_pending=100000,
                streams_per_user=max(levels) + 10,
                **c.NO_OWNER_QUOTAS,
            )
            with c.processes("streams") as procs:
                server = SimpleNamespace(workers=2, threads=4)
                port = start_server(procs, "web", "gobrave.asgi:application", env, server)
                wait_ready(procs, port, token)
                measure(port, token, SimpleNamespace(samples=20, creates=LIST_ROWS))  # warm-up
                followers = Followers(port, token)
                # Warm-up: followers opened and closed once, so that what a first follow
                # loads in each worker (aiodocker, aiohttp) is in the idle figures too.
                followers.add(ids, 40)
                followers.drop()
                time.sleep(2)
                rows, base = [], None
                try:
                    held = 0
                    for level in levels:
                        followers.add(ids, level - held)
                        held = level
                        main_pid = procs.procs["web"].pid
                        # The server's CPU with the followers alone, over 3 s.
                        cpu_before = c.tree_cpu_seconds(main_pid)
                        time.sleep(3)
                        quiet_cpu = (c.tree_cpu_seconds(main_pid) - cpu_before) / 3
                        cpu_before, started = c.tree_cpu_seconds(main_pid), time.monotonic()
                        figures = measure(port, token, args)
                        figures["cpu"] = (c.tree_cpu_seconds(main_pid) - cpu_before) / (
                            time.monotonic() - started
                        )
                        figures["quiet_cpu"] = quiet_cpu
                        rss = server_rss_kib(procs)
                        if base is None:
                            base = (figures, rss)
                        rows.append((level, figures, rss, followers.failed))
                finally:
                    followers.close()
                report(rows, base)
    finally:
        for container in containers:
            container.remove(force=True)
    return 0


def report(rows, base) -> None:
    (idle, idle_rss) = base
    idle_p95 = c.percentile(idle["lists"], 95)
    columns = ("followers", "list p50", "list p95", "x idle", "202 p50", "202 p95")
    columns += ("CPU quiet", "CPU busy", "RSS MiB", "KiB/f", "timeouts", "failed")
    print("   " + " ".join(f"{name:>9}" for name in columns))
    for level, figures, rss, failed in rows:
        p50 = c.percentile(figures["lists"], 50) * 1000
        p95 = c.percentile(figures["lists"], 95) * 1000
        cp50 = c.percentile(figures["creates"], 50) * 1000
        cp95 = c.percentile(figures["creates"], 95) * 1000
        per = (rss - idle_rss) / level if level else 0
        cells = (
            str(level),
            f"{p50:.1f}ms",
            f"{p95:.1f}ms",
            f"{p95 / (idle_p95 * 1000):.2f}",
            f"{cp50:.1f}ms",
            f"{cp95:.1f}ms",
            f"{figures['quiet_cpu'] * 100:.0f}%",
            f"{figures['cpu'] * 100:.0f}%",
            f"{rss / 1024:.1f}",
            f"{per:.1f}",
            str(figures["timeouts"]),
            str(failed),
        )
        print("   " + " ".join(f"{cell:>9}" for cell in cells))
    for level, figures, rss, failed in rows:
        if level == 200:
            ratio = c.percentile(figures["lists"], 95) / idle_p95
            per = (rss - idle_rss) / level
            print(
                f"   200 followers: list p95 {ratio:.2f}x idle (target <= {TARGET_P95_RATIO}: "
                f"{c.verdict(ratio <= TARGET_P95_RATIO)}); {per:.0f} KiB per follower "
                f"(target <= {TARGET_KIB_PER_FOLLOWER}: "
                f"{c.verdict(per <= TARGET_KIB_PER_FOLLOWER)})"
            )
        if level == 500:
            ok = figures["timeouts"] == 0 and failed == 0
            print(
                f"   500 followers: {figures['timeouts']} timeouts, {failed} failed followers "
                f"(target none: {c.verdict(ok)})"
            )


if __name__ == "__main__":
    sys.exit(main())
