"""The raw django-q2 client of the relay benchmark (run as a child, with the cluster's env).

Enqueues N no-op tasks (``bench.tasks.noop``) one by one to cluster ``create`` on the
configured broker, as the dispatcher would, and waits until all have run (each run
increments a Redis counter). Prints one JSON line: ``{"done", "enqueue_s", "elapsed_s"}``.

    python bench/_raw_django_q.py N COUNTER_KEY TIMEOUT
"""

from __future__ import annotations

import json
import os
import sys
import time

import _common  # noqa: F401 - puts the repository on sys.path
import django


def main() -> None:
    n, key, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    django.setup()
    import redis
    from django_q.tasks import async_task

    counter = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    counter.delete(key)
    t0 = time.perf_counter()
    for _ in range(n):
        async_task("bench.tasks.noop", key, cluster="create", save=False)
    enqueued = time.perf_counter() - t0
    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        done = int(counter.get(key) or 0)
        if done >= n:
            break
        time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    counter.delete(key)
    print(json.dumps({"done": done, "enqueue_s": enqueued, "elapsed_s": elapsed}))


if __name__ == "__main__":
    main()
