"""Rows: what an operator's reads, a create and the background loops cost as the rows grow.

One bench database (``gobrave_bench_rows``, made and dropped here) is filled in steps to
each size of ``--sizes`` (default 0, 100,000 and 1,000,000 instance rows) and at every
step the same figures are taken, each printed beside its figure on the empty database
(the ratio), all in one run:

- over HTTP, on the real web server (gunicorn with uvicorn's workers, as production and
  ``bench/end_to_end.py``): ``GET /api/containers/`` as an owner and as an operator, the
  admin's instance list, ``/metrics``, ``GET /api/queue/`` and a create's 202 (medians of
  ``--samples`` requests after two warm-ups, on a kept-open connection);
- in this process: a reconciler pass (``reconcile()``) over a fake engine holding
  ``PROBE`` running instances, the admission gate's two counts (``slot_count()`` and the
  gate's pending count, ``gobrave_admission_pending()``, in a rolled-back transaction)
  and the relay's fair-share claim of the create queue (rolled back).

Rows are made by ``INSERT ... SELECT generate_series`` in the server (a million instance
rows in about a minute): 1,000 owners, 90% of the instances ``stopped`` and 10%
``running`` (the 100,000 active rows of a million), two history events and one ``sent``
outbox row per instance; then ``VACUUM ANALYZE``, as autovacuum would. The owner measured
is one of the 1,000 (so their own list grows a thousandth as fast as the table).

At every size each query ``/metrics``, the admission gate and the reconciler's selection
run is shown with ``EXPLAIN (ANALYZE)``: the bench prints every sequential scan of a table
that holds more than ``SCAN_ROWS`` rows, so a query that reads the table rather than an
index shows at once.

    .venv/bin/python bench/rows.py [--sizes 0,100000,1000000] [--samples 15] [--keep]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time

import _common as c
from admission import start_server

OWNERS = 1000
PROBE = 10  # running instances on the reconciled fake engine
SCAN_ROWS = 10_000  # a sequential scan over more rows than this is printed
TARGETS = {100_000: 1.5, 1_000_000: 2.0}  # reads: at most this times the empty figure

INSTANCES = """
INSERT INTO containers_containerinstance
    (id, name, status, container_id, runtime_node_name, runtime_missing, exit_code,
     status_reason, spec, created_at, status_changed_at, started_at, finished_at,
     owner_id, template_id, runtime_id)
SELECT md5('bench-' || g)::uuid, 'i' || g,
       CASE WHEN g %% 10 = 0 THEN 'running' ELSE 'stopped' END, 'c' || g, 'bench', false,
       CASE WHEN g %% 10 = 0 THEN NULL ELSE 0 END, '', '{}'::jsonb,
       now() - interval '30 days' + g * interval '1 second',
       now() - interval '30 days' + g * interval '1 second',
       now() - interval '30 days' + g * interval '1 second',
       CASE WHEN g %% 10 = 0 THEN NULL ELSE now() - interval '29 days' END,
       %(first_owner)s + g %% %(owners)s, %(template)s, %(runtime)s
FROM generate_series(%(lo)s, %(hi)s) AS g
"""
EVENTS = """
INSERT INTO containers_containerevent
    (instance_id, instance_name, kind, from_status, to_status, message, actor, data, created_at)
SELECT md5('bench-' || g)::uuid, 'i' || g, e.kind, e.src, e.dst, '', 'bench', '{}'::jsonb,
       now() - interval '30 days' + g * interval '1 second'
FROM generate_series(%(lo)s, %(hi)s) AS g,
     (VALUES ('create', '', 'pending'), ('transition', 'creating', 'running')) AS e(kind, src, dst)
"""
OUTBOX = """
INSERT INTO outbox_outboxevent
    (kind, queue, aggregate_id, payload, status, attempts, reclaims, available_at, last_error,
     outcome, created_at, sent_at, started_at)
SELECT 'create', 'create', md5('bench-' || g)::uuid::text, '{}'::jsonb, 'sent', 1, 0,
       now() - interval '1 hour', '', 'sent', now() - interval '1 hour',
       now() - random() * interval '1 hour', now() - interval '1 hour'
FROM generate_series(%(lo)s, %(hi)s) AS g
"""


def fixtures(fake_dir: str) -> dict:
    """Owners, an operator, the bulk runtime (the rows' home, disabled: a pass does not
    compare them, see docs/benchmarks.md), the probe runtime with ``PROBE`` running
    instances its fake engine really holds, and the API tokens and admin session."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import transaction

    from containers.engines import engine_for
    from containers.engines.base import ContainerSpec
    from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
    from containers.installation import installation_id
    from containers.models import ContainerInstance, ContainerTemplate, Runtime
    from containers.requests.lifecycle import move
    from containers.states import Status
    from tenants.services import api_token_create

    owners = User.objects.bulk_create(
        User(username=f"owner{i:04d}", password="!") for i in range(OWNERS)
    )
    operator = User.objects.create_superuser("operator", password="bench-password-1")
    bulk = Runtime.objects.create(
        name="bulk", driver="fake", base_url=f"fake://{fake_dir}/bulk", enabled=False
    )
    probe = Runtime.objects.create(
        name="probe",
        driver="fake",
        base_url=f"fake://{fake_dir}/probe",
        labels={"engine": "fake"},
    )
    template = ContainerTemplate.objects.create(
        name="bench",
        image="gobrave-test-busybox:latest",
        command=["sleep", "3600"],
        pull_policy="never",
        constraints={"engine": "fake"},
    )
    engine = engine_for(probe)
    for i in range(PROBE):
        instance = ContainerInstance.objects.create(
            name=f"probe{i}", owner=operator, template=template, runtime=probe
        )
        spec = ContainerSpec(
            name=instance.container_name,
            image=template.image,
            command=list(template.command),
            labels={
                LABEL_INSTALLATION: installation_id(),
                LABEL_INSTANCE: str(instance.id),
            },
        )
        container_id = engine.create(spec)
        engine.start(container_id)
        with transaction.atomic():
            locked = ContainerInstance.objects.select_for_update().get(pk=instance.pk)
            move(locked, Status.CREATING, actor="bench")
            move(locked, Status.RUNNING, actor="bench")
        ContainerInstance.objects.filter(pk=instance.pk).update(container_id=container_id)
    session = SessionStore()
    session[SESSION_KEY] = str(operator.pk)
    session[BACKEND_SESSION_KEY] = "tenants.backends.PermissionsBackend"
    session[HASH_SESSION_KEY] = operator.get_session_auth_hash()
    session.create()
    return {
        "owner_token": api_token_create(user=owners[0], name="bench").key,
        "operator_token": api_token_create(user=operator, name="bench").key,
        "session": session.session_key,
        "first_owner": owners[0].pk,
        "template": template.pk,
        "bulk": bulk.pk,
        "probe": probe,
    }


def fill(fx: dict, lo: int, hi: int) -> float:
    """Add instance rows ``lo..hi`` (and their history); returns the seconds it took."""
    from django.db import connection

    t0 = time.perf_counter()
    step = 100_000
    with connection.cursor() as cursor:
        for start in range(lo, hi + 1, step):
            args = {
                "lo": start,
                "hi": min(hi, start + step - 1),
                "first_owner": fx["first_owner"],
                "owners": OWNERS,
                "template": fx["template"],
                "runtime": fx["bulk"],
            }
            for sql in (INSTANCES, EVENTS, OUTBOX):
                cursor.execute(sql, args)
    took = time.perf_counter() - t0
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return took


class Http:
    """One kept-open connection; every request's status is checked."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, path: str, headers: dict, expect: int = 200, body: dict | None = None) -> float:
        method = "GET" if body is None else "POST"
        payload = json.dumps(body).encode() if body is not None else None
        hdrs = {**headers, "Content-Type": "application/json"} if body is not None else headers
        t0 = time.perf_counter()
        try:
            self.conn.request(method, path, body=payload, headers=hdrs)
            response = self.conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):  # the server closed an idle connection
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self.conn.request(method, path, body=payload, headers=hdrs)
            response = self.conn.getresponse()
            data = response.read()
        took = time.perf_counter() - t0
        if response.status != expect:
            raise SystemExit(f"{method} {path}: {response.status} {data[:300]!r}")
        return took


def median_of(fn, samples: int) -> float:
    for _ in range(2):
        fn()
    return statistics.median(fn() for _ in range(samples))


def http_figures(port: int, fx: dict, samples: int, size: int) -> dict[str, float]:
    client = Http(port)
    owner = {"Authorization": f"Token {fx['owner_token']}"}
    operator = {"Authorization": f"Token {fx['operator_token']}"}
    admin = {"Cookie": f"sessionid={fx['session']}"}
    made = [0]

    def create() -> float:
        made[0] += 1
        body = {"template": "bench", "name": f"new-{size}-{made[0]}"}
        return client.get("/api/containers/", owner, expect=202, body=body)

    return {
        "GET /api/containers/ (owner)": median_of(
            lambda: client.get("/api/containers/", owner), samples
        ),
        "GET /api/containers/ (operator)": median_of(
            lambda: client.get("/api/containers/", operator), samples
        ),
        "admin instance list": median_of(
            lambda: client.get("/admin/containers/containerinstance/", admin), samples
        ),
        "/metrics": median_of(lambda: client.get("/metrics", {}), samples),
        "GET /api/queue/": median_of(lambda: client.get("/api/queue/", operator), samples),
        "POST /api/containers/ (202)": median_of(create, samples),
    }


class Rollback(Exception):
    pass


def in_rollback(fn):
    """Run ``fn`` in a transaction that is rolled back (the claim and the gate's lock
    change nothing between samples); returns its seconds."""
    from django.db import transaction

    t0 = time.perf_counter()
    try:
        with transaction.atomic():
            fn()
            took = time.perf_counter() - t0
            raise Rollback
    except Rollback:
        return took


def gate() -> None:
    """The admission gate's two counts: the pending count under the gate's lock, and the
    slots held (``slot_count``)."""
    from django.db import connection

    from containers.requests.slots import slot_count

    with connection.cursor() as cursor:
        cursor.execute("SELECT gobrave_admission_pending()")
    slot_count()


def loop_figures(fx: dict, samples: int) -> dict[str, float]:
    from containers.execution.reconciler import reconcile
    from outbox import relay

    def reconcile_pass() -> float:
        t0 = time.perf_counter()
        report = reconcile(runtimes=[fx["probe"]])
        if report.errors or report.checked != PROBE:
            raise SystemExit(f"reconcile pass: {report}")
        return time.perf_counter() - t0

    return {
        "reconciler pass (fake engine)": median_of(reconcile_pass, samples),
        "admission gate (pending + slot_count)": median_of(lambda: in_rollback(gate), samples),
        "fair-share claim (create queue)": median_of(
            lambda: in_rollback(lambda: relay.claim("create", 10)), samples
        ),
    }


def explain_all(fx: dict) -> list[str]:
    """Every sequential scan over more than ``SCAN_ROWS`` rows in the queries ``/metrics``,
    the admission gate, the claim and the reconciler's selection run."""
    from django.db import connection

    from containers.execution.reconciler import reconcile
    from core import prepared
    from gobrave.metrics import DatabaseCollector
    from outbox import relay

    queries: list[tuple[str, str, object]] = []

    def record(what):
        def wrapper(execute, sql, params, many, context):
            if sql.lstrip().upper().startswith(("SELECT", "WITH")):
                queries.append((what, sql, params))
            return execute(sql, params, many, context)

        return wrapper

    # Through the ORM's cursor, so that every statement is seen (``core.prepared`` runs
    # the hot ones on a cursor of its own); the plans are the same statements'.
    prepared.enabled = False
    try:
        for what, fn in (
            ("/metrics", lambda: list(DatabaseCollector().collect())),
            ("admission gate", lambda: in_rollback(gate)),
            ("fair-share claim", lambda: in_rollback(lambda: relay.claim("create", 10))),
            ("reconciler pass", lambda: reconcile(runtimes=[fx["probe"]])),
        ):
            with connection.execute_wrapper(record(what)):
                fn()
    finally:
        prepared.enabled = True
    found = []
    for what, sql, params in queries:
        plan = []

        def explain(sql=sql, params=params, plan=plan):
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
                plan.extend(_json(cursor.fetchone()[0]))

        try:
            in_rollback(explain)
        except Exception as exc:  # noqa: BLE001 - a statement EXPLAIN cannot take
            found.append(f"{what}: could not EXPLAIN ({exc.__class__.__name__}): {sql[:80]}")
            continue
        for node in _nodes(plan[0]["Plan"]):
            rows = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
            rows += node.get("Rows Removed by Filter", 0) * node.get("Actual Loops", 1)
            if node["Node Type"] == "Seq Scan" and rows > SCAN_ROWS:
                found.append(
                    f"{what}: Seq Scan on {node['Relation Name']} ({rows} rows read): "
                    f"{' '.join(sql.split())[:160]}"
                )
    return [f"{len(queries)} queries explained", *found]


def _json(value):
    return value if isinstance(value, list) else json.loads(value)


def _nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,100000,1000000")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    c.header("rows: reads, a create and the loops at 0 / 100k / 1M instance rows")
    fake_dir = tempfile.mkdtemp(prefix="gobrave-bench-rows-")
    results: dict[int, dict[str, float]] = {}
    with c.bench_database("rows", keep=args.keep) as url:
        env = c.app_env(
            url,
            pool=None,
            GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING="1000000",
            **c.NO_OWNER_QUOTAS,
        )
        c.django_setup(env)
        fx = fixtures(fake_dir)
        with c.processes("rows") as procs:
            port = start_server(
                procs,
                "web",
                "gobrave.asgi:application",
                env,
                argparse.Namespace(workers=2, threads=8),
            )
            c.wait_until(
                lambda: _ready(port, procs), timeout=60, interval=0.2, what="the web server"
            )
            made = 0
            for size in sizes:
                if size > made:
                    took = fill(fx, made + 1, size)
                    print(f"-- made instance rows {made + 1:,}..{size:,} in {took:.0f} s")
                    made = size
                print(f"-- {size:,} instance rows ({c.load()})")
                for line in explain_all(fx):
                    print(f"   EXPLAIN {line}")
                figures = {**http_figures(port, fx, args.samples, size)}
                figures.update(loop_figures(fx, args.samples))
                results[size] = figures
                base = results[sizes[0]]
                for name, value in figures.items():
                    ratio = value / base[name] if base[name] else float("nan")
                    print(
                        f"   {name:40s} {value * 1000:8.1f} ms  "
                        f"(empty {base[name] * 1000:6.1f} ms, {ratio:4.2f}x)"
                    )
    ok = True
    print("== targets (reads <= 1.5x empty at 100,000, <= 2x at 1,000,000; create unchanged)")
    for size, limit in TARGETS.items():
        if size not in results or sizes[0] != 0:
            continue
        for name, value in results[size].items():
            limit_here = 1.25 if name.startswith("POST") else limit
            ratio = value / results[0][name]
            met = ratio <= limit_here
            ok &= met
            print(f"   {size:>9,} {name:40s} {ratio:5.2f}x <= {limit_here}x: {c.verdict(met)}")
    return 0 if ok else 1


def _ready(port: int, procs) -> bool:
    procs.check()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/metrics")
        return conn.getresponse().status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
