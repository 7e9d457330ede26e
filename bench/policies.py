"""The lifecycle policies' pass at scale: how long one pass of every rule takes, and what
it reads, on a database of ``--rows`` instances (``bench/rows_data.py``). The figures of
docs/benchmarks.md, "The policy pass at 100,000 rows".

The rows: ``make_rows`` (90% stopped, 10% running), then, as the transitions would have
armed them, every running instance given a ``max_lifetime`` deadline spread over the next
day and every stopped one a ``delete_stopped_after`` deadline over the next week (none
within the hour: a quiet pass stays quiet), and one workspace per owner with
``workspace_retention`` on. ``--due`` of each kind (default: ``policies.batch_size``, the
most one pass makes of each) are put in the past, so the pass has
work: that many ordinary stop and delete requests (with their outbox rows and history),
made through the services. Timed: a pass with nothing due (the steady state), then
``--rounds`` times the pass with the due rows, each beside its peer measured in the same
run: the same requests for as many rows made due the same way, one at a time
(``container_stop`` and ``container_delete``, a transaction each: what the pass did
before its bulk path, and what as many people's requests cost); the two alternate which
goes first. Then the pass after them (nothing left: idempotent); each statement of the
quiet pass is ``EXPLAIN ANALYZE``d.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench.rows_plans import _nodes  # noqa: E402


def arm(*, engine_dir: str) -> None:
    """Arm the rows' deadlines (none due) and make their workspaces, in a few statements."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from containers.models import Runtime, Workspace

    Runtime.objects.filter(name="rows-runtime").update(base_url=f"fake://{engine_dir}")
    policy = (
        '{"max_lifetime": 86400, "idle_timeout": null, "idle_cpu_threshold": 0.02, '
        '"delete_stopped_after": 604800, "extendable_by": "owner", "extend_max": 86400}'
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE containers_containerinstance SET spec = spec || jsonb_build_object("
            "'policy', %s::jsonb), stop_at = CASE WHEN status = 'running' THEN now() + "
            "interval '1 hour' + random() * interval '1 day' END, delete_at = CASE WHEN "
            "status = 'stopped' THEN now() + interval '1 hour' + random() * interval '7 days' END",
            [policy],
        )
        cursor.execute("ANALYZE containers_containerinstance")
    runtime = Runtime.objects.get(name="rows-runtime")
    owners = (
        get_user_model().objects.filter(username__startswith="rows-").values_list("id", flat=True)
    )
    Workspace.objects.bulk_create(
        Workspace(runtime=runtime, owner_id=o, kind="volume", source=f"gb-ws-{o}", uid=o, gid=o)
        for o in owners
    )


def make_due(due: int) -> None:
    """Put ``due`` running instances past their time limit and ``due`` stopped ones past
    their delete_stopped_after."""
    from django.db import connection

    with connection.cursor() as cursor:
        for column, status in (("stop_at", "running"), ("delete_at", "stopped")):
            cursor.execute(
                f"UPDATE containers_containerinstance SET {column} = now() - interval '1 minute' "
                f"WHERE id IN (SELECT id FROM containers_containerinstance WHERE status = %s "
                f"LIMIT %s)",
                [status, due],
            )


def timed_pass(label: str):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from containers.execution.policies import policies_pass

    connection.queries_log.clear()  # it keeps 9,000: a longer run would count none
    with CaptureQueriesContext(connection) as captured:
        start = time.perf_counter()
        report = policies_pass()
        took = time.perf_counter() - start
    print(f"{label}: {took * 1000:.1f} ms, {len(captured.captured_queries)} queries; {report}")
    return took, captured.captured_queries


def one_at_a_time(due: int):
    """The peer: the due rows' requests made one at a time, a transaction each
    (``container_stop``, ``container_delete``), with the reasons the pass gives them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from containers.models import ContainerInstance
    from containers.requests.services import container_delete, container_stop

    connection.queries_log.clear()  # it keeps 9,000: a longer run would count none
    with CaptureQueriesContext(connection) as captured:
        start = time.perf_counter()
        now = timezone.now()
        rows = ContainerInstance.objects.filter(stop_at__lte=now, status__in=("running", "paused"))
        for instance_id in rows.order_by("stop_at").values_list("id", flat=True)[:due]:
            container_stop(
                instance_id=instance_id, actor="policy", reason="max_lifetime: running longer "
                "than 1d", data={"rule": "max_lifetime"},
            )  # fmt: skip
        rows = ContainerInstance.objects.filter(
            delete_at__lte=now, status__in=("stopped", "failed")
        )
        for instance_id in rows.order_by("delete_at").values_list("id", flat=True)[:due]:
            container_delete(
                instance_id=instance_id, actor="policy", reason="delete_stopped_after: stopped "
                "for longer than 7d", data={"rule": "delete_stopped_after"},
            )  # fmt: skip
        took = time.perf_counter() - start
    queries = len(captured.captured_queries)
    print(f"  one at a time ({due} stops, {due} deletes): {took * 1000:.1f} ms, {queries} queries")
    return took


def explain(queries) -> None:
    from django.db import connection

    for query in queries:
        sql = query["sql"]
        if not sql.lstrip().upper().startswith("SELECT") or "%" in sql:
            continue  # a prepared statement's placeholders: not a statement of a quiet pass
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0][0]
        print(f"  {plan['Execution Time']:8.2f} ms  {sql[:110]}")
        for line in _nodes(plan["Plan"])[:6]:
            print(f"               {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="instances")
    parser.add_argument("--owners", type=int, default=1_000)
    parser.add_argument(
        "--due", type=int, help="due stops and due deletes (default: policies.batch_size, "
        "the most one pass makes of each)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5, help="due passes (and peers) timed")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--db", default="policies", help="the database's name: gobrave_bench_<db> (made, dropped)"
    )
    args = parser.parse_args()

    c.header(f"policies: one pass at {args.rows:,} instances")
    with (
        c.bench_database(args.db, keep=args.keep_db) as url,
        tempfile.TemporaryDirectory(prefix="gobrave-bench-policies-") as engine_dir,
    ):
        c.django_setup(
            c.app_env(url, container_policies__workspace_retention="30d", **c.NO_OWNER_QUOTAS)
        )
        from django.conf import settings

        from bench.rows_data import make_rows

        args.due = args.due or int(settings.GOBRAVE["container"]["policies"]["batch_size"])
        print(make_rows(args.rows, owners=args.owners))
        arm(engine_dir=engine_dir)
        timed_pass("first pass (marks the owners' workspaces unused)")
        quiet, queries = timed_pass("pass with nothing due")
        bulk, lone = [], []
        for round_ in range(args.rounds):
            for mode in ("bulk", "lone") if round_ % 2 == 0 else ("lone", "bulk"):
                make_due(args.due)
                if mode == "bulk":
                    label = f"  the pass ({args.due} stops and {args.due} deletes due)"
                    bulk.append(timed_pass(label)[0])
                else:
                    lone.append(one_at_a_time(args.due))
        after = timed_pass("the pass after them (nothing left to do)")[0]
        due_pass = statistics.median(bulk)
        print(
            f"with {args.due} stops and {args.due} deletes due, median of {args.rounds} "
            f"(slowest): the pass {due_pass * 1000:.1f} ms ({max(bulk) * 1000:.1f}), the same "
            f"requests one at a time {statistics.median(lone) * 1000:.1f} ms "
            f"({max(lone) * 1000:.1f}); quiet pass {quiet * 1000:.1f} ms, the pass after "
            f"{after * 1000:.1f} ms"
        )
        print("statements of the pass with nothing due:")
        explain(queries)
        ok = quiet < 1.0 and due_pass < 1.0
        print(f"target: a pass under 1 s (the median pass with work to do): {c.verdict(ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
