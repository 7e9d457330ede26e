"""Rows at scale for the read benchmarks: ``make_rows(100_000)`` fills a database with
instances of 1,000 owners (90% stopped, 10% running) and their history in proportion.

The one row maker of ``bench/rows.py`` and ``bench/rows_plans.py``. Rows are made in the
server by ``INSERT ... SELECT generate_series`` in statements of ``STEP`` instances (a
million instances and their history in a few minutes on a busy machine). Every column the
statements do not set takes its field's Python default (read from the model, so a field
a migration adds needs no change here unless it has neither a default nor NULL); a
column with a database default (``txid``) is left to it. Not for SQLite, and never for a
database that serves anyone: it writes straight into the tables, past the services.

Per instance: three ``ContainerEvent`` rows (requested, creating→running, and
running→stopped for a stopped one, a note for a running one) and one outbox row (the
create request, ``sent``). Per 20 instances: one DAG run (90% succeeded) with two
``DagEvent`` rows. Creation times are spread over the last ``days`` days, oldest first, so
time filters have something to cut. Then ``VACUUM ANALYZE`` of the tables written, as
autovacuum would.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

STEP = 100_000  # instances per statement


@dataclass(frozen=True)
class Made:
    """What ``make_rows`` wrote."""

    instances: int
    owners: int
    events: int
    outbox: int
    dag_runs: int
    dag_events: int


def _insert(cursor, model, exprs: dict[str, str], source: str, params: dict) -> int:
    """``INSERT INTO model (...) SELECT ... FROM source``: each column from ``exprs`` (SQL
    over ``g``, the instance's number) or else its field's Python default, passed once
    as a parameter; returns the rows written."""
    from django.db import connection, models

    columns, values, params = [], [], dict(params)
    for field in model._meta.concrete_fields:
        if field.column not in exprs and (
            (isinstance(field, models.AutoField) and field.primary_key) or field.has_db_default()
        ):
            continue  # the database's own
        columns.append(connection.ops.quote_name(field.column))
        if field.column in exprs:
            values.append(exprs[field.column])
            continue
        default = field.get_default()
        if default is None and not field.null:
            raise RuntimeError(f"make_rows: {model.__name__}.{field.name} needs a value")
        params[f"d_{field.column}"] = field.get_db_prep_save(default, connection)
        values.append(f"%(d_{field.column})s")
    table = connection.ops.quote_name(model._meta.db_table)
    cursor.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {source}",
        params,
    )
    return cursor.rowcount


AT = "%(start)s::timestamptz + (g - %(first)s) * %(step)s::interval"
RUNNING = "g %% 10 = 0"
INSTANCE = {
    "id": "md5(%(tag)s || g)::uuid",
    "name": "'r' || %(tag)s || g",
    "owner_id": "(%(owners)s::int[])[1 + g %% cardinality(%(owners)s::int[])]",
    "template_id": "%(template)s",
    "runtime_id": "%(runtime)s",
    "status": f"CASE WHEN {RUNNING} THEN 'running' ELSE 'stopped' END",
    "container_id": "'rows' || %(tag)s || g",
    "runtime_node_name": "'rows'",
    "exit_code": f"CASE WHEN {RUNNING} THEN NULL ELSE 0 END",
    "spec": """'{"image": "gobrave-test-busybox:latest", "name": "", "env": {},
               "labels": {}, "mounts": []}'::jsonb""",
    "created_at": AT,
    "status_changed_at": AT,
    "started_at": AT,
    "finished_at": f"CASE WHEN {RUNNING} THEN NULL ELSE {AT} END",
}
OF_INSTANCE = {
    "instance_id": INSTANCE["id"],
    "instance_name": INSTANCE["name"],
    "owner_id": INSTANCE["owner_id"],
    "created_at": AT,
}
EVENTS = [  # (columns, which instances)
    ({"kind": "'requested'", "to_status": "'pending'", "actor": "'user'"}, "true"),
    (
        {
            "kind": "'transition'",
            "from_status": "'creating'",
            "to_status": "'running'",
            "actor": "'worker'",
        },
        "true",
    ),
    (
        {
            "kind": "'transition'",
            "from_status": "'running'",
            "to_status": "'stopped'",
            "actor": "'user'",
        },
        f"NOT {RUNNING}",
    ),
    ({"kind": "'note'", "message": "'started'", "actor": "'worker'"}, RUNNING),
]
OUTBOX = {
    "kind": "'ContainerCreateRequest'",
    "queue": "'create'",
    "aggregate_id": f"({INSTANCE['id']})::text",
    "fairness_key": f"({INSTANCE['owner_id']})::text",
    "status": "'sent'",
    "outcome": "'sent'",
    "attempts": "1",
    "available_at": AT,
    "created_at": AT,
    "sent_at": AT,
}
RUN_ID = "md5('run' || %(tag)s || g)::uuid"
DAG_RUN = {
    "id": RUN_ID,
    "template_name": "'rows-dag'",
    "owner_id": INSTANCE["owner_id"],
    "status": "CASE WHEN g %% 200 = 0 THEN 'running' ELSE 'succeeded' END",
    "created_at": AT,
    "status_changed_at": AT,
}
DAG_EVENTS = [
    {
        "run_id": RUN_ID,
        "owner_id": INSTANCE["owner_id"],
        "kind": kind,
        "actor": "'user'",
        "created_at": AT,
    }  # fmt: skip
    for kind in ("'created'", "'transition'")
]


def make_rows(
    n_instances: int,
    *,
    owners: int | Sequence[int] = 1_000,
    using: str = "default",
    days: int = 30,
    template: int | None = None,
    runtime: int | None = None,
    vacuum: bool = True,
) -> Made:
    """Add ``n_instances`` instances with their history, owned in turn by ``owners``:
    that many new users (named ``rows-<batch>-<n>``), or the given user ids.

    Needs a migrated PostgreSQL database (``using``) and Django set up. The instances'
    template and runtime are ``template`` and ``runtime`` (ids), or else one template
    (``rows-template``) and one runtime (``rows-runtime``, the fake driver, disabled)
    made if missing. Not idempotent: each call adds rows. ``vacuum`` runs ``VACUUM
    ANALYZE`` of the tables written (outside a transaction only).
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connections
    from django.utils import timezone

    from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate, Runtime
    from dags.models import DagEvent, DagRun
    from outbox.models import OutboxEvent

    connection = connections[using]
    if connection.vendor != "postgresql":
        raise RuntimeError("make_rows writes with PostgreSQL's INSERT ... SELECT")
    if using != "default":
        raise RuntimeError("make_rows writes through the default connection")
    tag = uuid.uuid4().hex[:6]
    if isinstance(owners, int):
        User = get_user_model()
        password = make_password(None)
        User.objects.bulk_create(
            User(username=f"rows-{tag}-{i}", password=password) for i in range(owners)
        )
        owner_ids = list(
            User.objects.filter(username__startswith=f"rows-{tag}-")
            .order_by("id")
            .values_list("id", flat=True)
        )
    else:
        owner_ids = list(owners)
    if template is None:
        template = ContainerTemplate.objects.get_or_create(
            name="rows-template", defaults={"image": "gobrave-test-busybox:latest"}
        )[0].pk
    if runtime is None:
        runtime = Runtime.objects.get_or_create(
            name="rows-runtime", defaults={"driver": "fake", "enabled": False}
        )[0].pk
    made = dict.fromkeys(("instances", "events", "outbox", "dag_runs", "dag_events"), 0)
    params = {
        "tag": tag,
        "owners": owner_ids,
        "template": template,
        "runtime": runtime,
        "first": 1,
        "start": timezone.now() - dt.timedelta(days=days),
        "step": dt.timedelta(days=days) / max(n_instances, 1),
    }
    with connection.cursor() as cursor:
        for lo in range(1, n_instances + 1, STEP):
            hi = min(n_instances, lo + STEP - 1)
            series = f"generate_series({lo}, {hi}) AS g"
            made["instances"] += _insert(cursor, ContainerInstance, INSTANCE, series, params)
            for columns, which in EVENTS:
                made["events"] += _insert(
                    cursor,
                    ContainerEvent,
                    {**OF_INSTANCE, **columns},
                    f"{series} WHERE {which}",
                    params,
                )
            made["outbox"] += _insert(cursor, OutboxEvent, OUTBOX, series, params)
            every_20th = f"{series} WHERE g %% 20 = 0"
            made["dag_runs"] += _insert(cursor, DagRun, DAG_RUN, every_20th, params)
            for columns in DAG_EVENTS:
                made["dag_events"] += _insert(cursor, DagEvent, columns, every_20th, params)
        models = (ContainerInstance, ContainerEvent, OutboxEvent, DagRun, DagEvent)
        for model in models:
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"{'VACUUM ' if vacuum else ''}ANALYZE {table}")
    return Made(owners=len(owner_ids), **made)
