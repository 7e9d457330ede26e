"""Reads at scale, statement by statement: each list an operator reads, its queries
counted and each one ``EXPLAIN ANALYZE``d, on a database of ``--rows`` instances
(``bench/rows_data.py``). The figures of docs/benchmarks.md, "Reads at 100,000 rows".

Each request is made in-process (Django's test client, logged in by session) as an owner,
an operator or the superuser. Printed per request: the number of queries, then each
statement that took longer than ``--over`` ms (all with ``--all``) with its plan's
nodes. Timings of whole requests are left to ``bench/rows.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402


def _nodes(node: dict, depth: int = 0) -> list[str]:
    line = "  " * depth + node["Node Type"]
    if node.get("Index Name"):
        line += f" using {node['Index Name']}"
    elif node.get("Relation Name"):
        line += f" on {node['Relation Name']}"
    lines = [f"{line} (rows {node.get('Actual Rows')})"]
    for child in node.get("Plans", []):
        lines += _nodes(child, depth + 1)
    return lines


def _reads():
    """(who, url) of every read measured; the users and rows they need are made here."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from containers.models import ContainerInstance
    from dags.models import DagRun
    from tenants.roles import OPERATORS, roles_install

    users = get_user_model()
    roles_install()
    operator = users.objects.create(username="plans-operator", is_staff=True)
    operator.groups.add(Group.objects.get(name=OPERATORS))
    root = users.objects.create(username="plans-root", is_staff=True, is_superuser=True)
    owner = users.objects.filter(username__startswith="rows-").order_by("id").first()
    instance = ContainerInstance.objects.filter(owner=owner).order_by("-created_at").first()
    run = DagRun.objects.order_by("-created_at").first()
    who = {"owner": owner, "operator": operator, "superuser": root}
    reads = [
        ("owner", "/api/containers/"),
        ("operator", "/api/containers/"),
        ("operator", "/api/containers/?status=running"),
        ("operator", f"/api/containers/?owner={owner.username}"),
        ("operator", "/api/containers/?ordering=name"),
        ("owner", f"/api/containers/{instance.pk}/events/"),
        ("operator", "/api/dag-runs/"),
        ("operator", f"/api/dag-runs/{run.pk}/events/"),
        ("operator", "/api/outbox/"),
        ("operator", "/api/queue/"),
        ("owner", "/api/events/"),
        ("operator", "/api/events/"),
        ("operator", f"/api/events/?owner={owner.username}"),
        ("operator", f"/api/events/?instance={instance.pk}"),
        ("operator", "/api/events/?kind=transition"),
        ("operator", "/api/events/?actor=worker&source=instance"),
        ("superuser", "/admin/containers/containerinstance/"),
        ("superuser", f"/admin/containers/containerinstance/?owner={owner.username}"),
        ("superuser", "/admin/containers/containerinstance/?status__exact=running"),
        ("superuser", "/admin/containers/containerevent/"),
        ("superuser", "/admin/outbox/outboxevent/"),
        ("superuser", "/admin/dags/dagrun/"),
        ("superuser", "/admin/dags/dagevent/"),
    ]
    return who, reads


def measure(*, over: float, show_all: bool) -> None:
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    settings.ALLOWED_HOSTS = ["testserver"]
    who, reads = _reads()
    clients = {}
    for name, user in who.items():
        clients[name] = Client()
        clients[name].force_login(user)
    for name, url in reads:
        client = clients[name]
        client.get(url)  # warm
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        print(f"\n{name:9} GET {url}: HTTP {response.status_code}, ", end="")
        print(f"{len(captured.captured_queries)} queries, {len(response.content):,} bytes")
        for query in captured.captured_queries:
            sql = query["sql"]
            if "%s" in sql or not sql.lstrip().upper().startswith("SELECT"):
                continue  # a statement shown with its parameters apart: not re-runnable
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
                plan = cursor.fetchone()[0][0]
            took = plan["Execution Time"]
            if show_all or took > over:
                print(f"  {took:8.2f} ms  {sql[:110]}")
                for line in _nodes(plan["Plan"])[:10]:
                    print(f"               {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="instances")
    parser.add_argument("--owners", type=int, default=1_000)
    parser.add_argument("--over", type=float, default=1.0, help="show statements over (ms)")
    parser.add_argument("--all", action="store_true", help="show every statement")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()

    c.header(f"rows plans: the reads' statements at {args.rows:,} instances")
    with c.bench_database("rows_plans", keep=args.keep_db) as url:
        c.django_setup(c.app_env(url, settings="gobrave.settings"))
        from bench.rows_data import make_rows

        print(make_rows(args.rows, owners=args.owners))
        measure(over=args.over, show_all=args.all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
