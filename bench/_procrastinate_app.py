"""The Procrastinate peer of the relay benchmark: one no-op task, its schema and worker.

BENCH_PROCRASTINATE_DSN=... python bench/_procrastinate_app.py schema
BENCH_PROCRASTINATE_DSN=... python bench/_procrastinate_app.py worker CONCURRENCY
"""

from __future__ import annotations

import os
import sys

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_PROCRASTINATE_DSN"])
)


@app.task(name="bench_noop", queue="bench")
def noop(i: int) -> None:
    return None


if __name__ == "__main__":
    if sys.argv[1] == "schema":
        with app.open():
            app.schema_manager.apply_schema()
    elif sys.argv[1] == "worker":
        app.run_worker(queues=["bench"], concurrency=int(sys.argv[2]), wait=True)
