"""Rows: what an operator's reads, a create and the background loops cost as the rows grow.

One bench database (``gobrave_bench_rows``, made and dropped here) is filled in steps to
each size of ``--sizes`` (default 0, 100,000 and 1,000,000 instance rows) and at every
step the same figures are taken, each printed beside its figure on the empty database
(the ratio), all in one run:

- over HTTP, on the real web server (gunicorn with uvicorn's workers, as production and
  ``bench/end_to_end.py``): ``GET /api/containers/`` as an owner and as an operator, the
  admin's instance list, ``/metrics``, ``GET /api/queue/``, the events feed
  (``GET /api/events/``) as an owner and as an operator, and a create's 202 (medians of
  ``--samples`` requests after two warm-ups, on a kept-open connection);
- in this process: a reconciler pass (``reconcile()``) over a fake engine holding
  ``PROBE`` running instances, the admission gate's two counts (``slot_count()`` and the
  gate's pending count, ``gobrave_admission_pending()``, in a rolled-back transaction)
  and the relay's fair-share claim of the create queue (rolled back).

Rows are made by ``rows_data.make_rows`` (``INSERT ... SELECT generate_series`` in the
server): 1,000 owners, 90% of the instances ``stopped`` and 10% ``running`` (the 100,000
active rows of a million), three history events and one ``sent`` outbox row per
instance, a DAG run with two events per 20; then ``VACUUM ANALYZE``, as autovacuum would.
The owner measured is one of the 1,000 (so their own list grows a thousandth as fast as the table).

At every size each query ``/metrics``, the admission gate and the reconciler's selection
run is shown with ``EXPLAIN (ANALYZE)``: the bench prints every sequential scan of a table
that holds more than ``SCAN_ROWS`` rows, so a query that reads the table rather than an
index shows at once.

Both databases start with ``--floor`` (200) instance rows of the measured owner, so that
every list measured shows a full page on both sides (the admin's 100 rows, the API's 50,
the owner's own list and feed): a list of 100 rows
against one of the 10 probe instances would measure the page, not the table. ``--floor
0`` compares with the bare fixtures, as issue 29's first figures did.

    .venv/bin/python bench/rows.py [--sizes 0,100000,1000000] [--samples 15] [--floor 200]
                                   [--keep]
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
FLOOR = 200  # rows on both sides at the start: every list's page is full on both
SCAN_ROWS = 10_000  # a sequential scan over more rows than this is printed
TARGETS = {100_000: 1.5, 1_000_000: 2.0}  # reads: at most this times the empty figure
CREATE_TARGET = 1.25  # a create's 202: unchanged, within this machine's noise
EMPTY, FULL = "empty", "full"


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
        "owners": [owner.pk for owner in owners],
        "template": template.pk,
        "bulk": bulk.pk,
        "probe": probe,
    }


def fill(fx: dict, n: int, owners: list[int] | None = None) -> float:
    """Add ``n`` instance rows of the bench's owners on the bulk runtime, with their
    history (``rows_data.make_rows``, then ``VACUUM ANALYZE``); returns the seconds it
    took."""
    from rows_data import make_rows

    t0 = time.perf_counter()
    owners = owners or fx["owners"]
    make_rows(n, owners=owners, template=fx["template"], runtime=fx["bulk"])
    return time.perf_counter() - t0


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


def paired(fn, samples: int) -> tuple[float, float]:
    """Medians of ``fn(side)`` on the empty and the full database, taken in pairs after
    two warm-ups each, so both see the same load of a shared machine; the pair's order
    alternates (empty first, then full first), as the first of two requests in a row
    pays more; returns ``(empty, full)`` in seconds."""
    for _ in range(2):
        fn(EMPTY), fn(FULL)
    times: dict[str, list[float]] = {EMPTY: [], FULL: []}
    for i in range(samples):
        for side in (EMPTY, FULL) if i % 2 == 0 else (FULL, EMPTY):
            times[side].append(fn(side))
    return statistics.median(times[EMPTY]), statistics.median(times[FULL])


def http_figures(ports: dict, fxs: dict, samples: int, size: int) -> dict[str, tuple]:
    clients = {side: Http(port) for side, port in ports.items()}

    def auth(side: str, who: str) -> dict:
        if who == "admin":
            return {"Cookie": f"sessionid={fxs[side]['session']}"}
        return {"Authorization": f"Token {fxs[side][who + '_token']}"} if who else {}

    def read(path: str, who: str):
        return lambda side: clients[side].get(path, auth(side, who))

    made = [0]

    def create(side: str) -> float:
        made[0] += 1
        body = {"template": "bench", "name": f"new-{size}-{made[0]}"}
        return clients[side].get("/api/containers/", auth(side, "owner"), expect=202, body=body)

    return {
        "GET /api/containers/ (owner)": paired(read("/api/containers/", "owner"), samples),
        "GET /api/containers/ (operator)": paired(read("/api/containers/", "operator"), samples),
        "admin instance list": paired(
            read("/admin/containers/containerinstance/", "admin"), samples
        ),
        "/metrics": paired(read("/metrics", ""), samples),
        "GET /api/queue/": paired(read("/api/queue/", "operator"), samples),
        "GET /api/events/ (owner)": paired(read("/api/events/", "owner"), samples),
        "GET /api/events/ (operator)": paired(read("/api/events/", "operator"), samples),
        "POST /api/containers/ (202)": paired(create, samples),
    }


def use(dbname: str) -> None:
    """Point this process's Django connection at ``dbname`` (plain connections, no pool:
    the next query connects there)."""
    from django.db import connection

    if connection.settings_dict["NAME"] != dbname:
        connection.close()
        connection.settings_dict["NAME"] = dbname


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


def loop_figures(dbs: dict, fxs: dict, samples: int) -> dict[str, tuple]:
    from containers.execution.reconciler import reconcile
    from outbox import relay

    def on(side: str, fn) -> float:
        use(dbs[side])
        fn()  # after a switch: connect, prepare the statements (not timed)
        return fn()

    def reconcile_pass(side: str):
        def one() -> float:
            t0 = time.perf_counter()
            report = reconcile(runtimes=[fxs[side]["probe"]])
            if report.errors or report.checked != PROBE:
                raise SystemExit(f"reconcile pass: {report}")
            return time.perf_counter() - t0

        return one

    figures = {
        "reconciler pass (fake engine)": paired(lambda s: on(s, reconcile_pass(s)), samples),
        "admission gate (pending + slot_count)": paired(
            lambda s: on(s, lambda: in_rollback(gate)), samples
        ),
        "fair-share claim (create queue)": paired(
            lambda s: on(s, lambda: in_rollback(lambda: relay.claim("create", 10))), samples
        ),
    }
    use(dbs[FULL])
    return figures


def explain_all(fx: dict) -> list[str]:
    """Every scan that reads more than ``SCAN_ROWS`` rows (of a table or an index) in the
    queries ``/metrics``, the admission gate, the claim and a reconciler pass run, and in
    the reconciler's reads of the bulk runtime (its live rows, a turn of its stopped ones:
    the live ones are bounded by the active rows, so they show here, over an index)."""
    from django.db import connection

    from containers.execution import reconciler
    from containers.execution.reconciler import reconcile
    from containers.models import Runtime
    from core import prepared
    from gobrave.metrics import DatabaseCollector
    from outbox import relay

    bulk = Runtime.objects.get(pk=fx["bulk"])
    queries: list[tuple[str, str, object]] = []

    def record(what):
        def wrapper(execute, sql, params, many, context):
            if sql.lstrip().upper().startswith(("SELECT", "WITH")):
                queries.append((what, sql, params))
            return execute(sql, params, many, context)

        return wrapper

    # Through the ORM's cursor, so that every statement is seen (``core.prepared`` runs
    # the hot ones on a cursor of its own); the plans are the same statements'.
    prepared.layer.enabled = False
    try:
        for what, fn in (
            ("/metrics", lambda: list(DatabaseCollector().collect())),
            ("admission gate", lambda: in_rollback(gate)),
            ("fair-share claim", lambda: in_rollback(lambda: relay.claim("create", 10))),
            ("reconciler pass", lambda: reconcile(runtimes=[fx["probe"]])),
            ("reconciler reads, bulk runtime", lambda: _bulk_reads(reconciler, bulk)),
        ):
            with connection.execute_wrapper(record(what)):
                fn()
    finally:
        prepared.layer.enabled = True
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
            loops = node.get("Actual Loops", 1)
            rows = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
            where = node.get("Relation Name") or node.get("Index Name")
            if where and rows > SCAN_ROWS:
                via = (
                    f" via {node['Index Name']}"
                    if "Relation Name" in node and "Index Name" in node
                    else ""
                )
                found.append(
                    f"{what}: {node['Node Type']} on {where}{via} ({rows:,} rows read, "
                    f"{plan[0]['Execution Time']:.1f} ms): {' '.join(sql.split())[:140]}"
                )
    return [f"{len(queries)} queries explained", *found]


def _bulk_reads(reconciler, runtime) -> None:
    rows = reconciler._active_rows(runtime)
    reconciler._stopped_rows(runtime, {}, known=rows, batch=reconciler.STOPPED_BATCH)


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
    parser.add_argument("--keep", action="store_true", help="keep the bench databases")
    parser.add_argument(
        "--floor",
        type=int,
        default=FLOOR,
        help="instance rows both databases hold before the sizes (0: the bare fixtures)",
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    c.header("rows: reads, a create and the loops at 0 / 100k / 1M instance rows")
    fake_dir = tempfile.mkdtemp(prefix="gobrave-bench-rows-")
    results: dict[int, dict[str, tuple]] = {}
    with (
        c.bench_database("rows_empty", keep=args.keep) as empty_url,
        c.bench_database("rows", keep=args.keep) as full_url,
    ):
        config = {
            "GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING": "1000000",
            **c.NO_OWNER_QUOTAS,
        }
        urls = {EMPTY: empty_url, FULL: full_url}
        dbs = {side: url.rsplit("/", 1)[1] for side, url in urls.items()}
        c.django_setup(c.app_env(full_url, pool="0", **config))
        fxs = {}
        for side in (EMPTY, FULL):
            use(dbs[side])
            fxs[side] = fixtures(f"{fake_dir}/{side}")
            if args.floor:  # the measured owner's: their list and feed are full too
                fill(fxs[side], args.floor, owners=fxs[side]["owners"][:1])
        with c.processes("rows") as procs:
            ports = {}
            for side, url in urls.items():
                ports[side] = start_server(
                    procs,
                    f"web-{side}",
                    "gobrave.asgi:application",
                    c.app_env(url, pool=None, **config),
                    argparse.Namespace(workers=2, threads=8),
                )
            for port in ports.values():
                c.wait_until(
                    lambda port=port: _ready(port, procs),
                    timeout=60,
                    interval=0.2,
                    what="the web server",
                )
            made = 0
            for size in sizes:
                use(dbs[FULL])
                if size > made:
                    took = fill(fxs[FULL], size - made)
                    print(f"-- made instance rows {made + 1:,}..{size:,} in {took:.0f} s")
                    made = size
                print(f"-- {size:,} instance rows over the floor of {args.floor:,} ({c.load()})")
                for line in explain_all(fxs[FULL]):
                    print(f"   EXPLAIN {line}")
                figures = http_figures(ports, fxs, args.samples, size)
                figures.update(loop_figures(dbs, fxs, args.samples))
                results[size] = figures
                for name, (empty, full) in figures.items():
                    print(
                        f"   {name:40s} {full * 1000:8.1f} ms  "
                        f"(empty {empty * 1000:6.1f} ms, {full / empty:5.2f}x)"
                    )
    ok = True
    print("== targets (reads <= 1.5x empty at 100,000, <= 2x at 1,000,000; a create <= 1.25x)")
    for size, limit in TARGETS.items():
        for name, (empty, full) in results.get(size, {}).items():
            limit_here = CREATE_TARGET if name.startswith("POST") else limit
            met = full / empty <= limit_here
            ok &= met
            print(
                f"   {size:>9,} {name:40s} {full / empty:5.2f}x <= {limit_here}x: {c.verdict(met)}"
            )
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
