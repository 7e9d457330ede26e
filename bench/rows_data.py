"""Rows at scale for the read benchmarks: ``make_rows(100_000)`` fills a database with
instances of 1,000 owners (90% stopped, 10% running) and their history in proportion.

Used by ``bench/rows.py`` and by the query plans of ``docs/benchmarks.md`` ("Reads at
100,000 rows"). Rows are built as model objects (so every field a migration adds gets its
Python default) and written with PostgreSQL's ``COPY`` in batches: 100,000 instances and
their history take about a minute on the project's machine. Not for SQLite, and never
for a database that serves anyone: it writes straight into the tables, past the services.

Per instance: three ``ContainerEvent`` rows (requested, creating→running, and
running→stopped for a stopped one) and one outbox row (the create request, ``sent``).
Per 20 instances: one DAG run (90% succeeded) with two ``DagEvent`` rows. Creation times
are spread over the last ``days`` days, oldest first, so time filters have something to cut.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

BATCH = 20_000


@dataclass(frozen=True)
class Made:
    """What ``make_rows`` wrote."""

    instances: int
    owners: int
    events: int
    outbox: int
    dag_runs: int
    dag_events: int


def _value(field, obj, connection):
    from django.db import models

    if isinstance(field, models.DateTimeField) and (field.auto_now_add or field.auto_now):
        value = getattr(obj, field.attname)  # set by make_rows: keep it
    else:
        value = field.pre_save(obj, add=True)
    return field.get_db_prep_save(value, connection)


def _copy(model, objs: Iterable, using: str) -> int:
    """Write ``objs`` of ``model`` with one ``COPY`` per batch; returns how many."""
    from django.db import connections, models, transaction

    connection = connections[using]
    fields = [  # an auto primary key and a column's own default (``txid``) are the database's
        field
        for field in model._meta.concrete_fields
        if not (isinstance(field, models.AutoField) and field.primary_key)
        and not field.has_db_default()
    ]
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    written = 0
    iterator: Iterator = iter(objs)
    while batch := list(islice(iterator, BATCH)):
        sql = f"COPY {table} ({columns}) FROM STDIN"
        with (
            transaction.atomic(using=using),
            connection.cursor() as cursor,
            cursor.cursor.copy(sql) as copy,
        ):
            for obj in batch:
                copy.write_row([_value(field, obj, connection) for field in fields])
        written += len(batch)
    return written


def make_rows(
    n_instances: int, *, owners: int = 1_000, using: str = "default", days: int = 30
) -> Made:
    """Add ``n_instances`` instances of ``owners`` new users, with their history.

    Needs a migrated PostgreSQL database (``using``) and Django set up; creates one
    template (``rows-template``) and one runtime (``rows-runtime``, the fake driver) if
    they are missing. Not idempotent: each call adds rows (and owners named
    ``rows-<batch>-<n>``).
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connections
    from django.utils import timezone

    from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate, Runtime
    from containers.states import Status
    from dags.models import DagEvent, DagRun
    from outbox.models import OutboxEvent, OutboxStatus

    if connections[using].vendor != "postgresql":
        raise RuntimeError("make_rows writes with PostgreSQL's COPY")
    User = get_user_model()
    tag = uuid.uuid4().hex[:6]
    password = make_password(None)
    User.objects.using(using).bulk_create(
        User(username=f"rows-{tag}-{i}", password=password) for i in range(owners)
    )
    owner_ids = list(
        User.objects.using(using)
        .filter(username__startswith=f"rows-{tag}-")
        .order_by("id")
        .values_list("id", flat=True)
    )
    template, _ = ContainerTemplate.objects.using(using).get_or_create(
        name="rows-template", defaults={"image": "gobrave-test-busybox:latest"}
    )
    runtime, _ = Runtime.objects.using(using).get_or_create(
        name="rows-runtime", defaults={"driver": "fake"}
    )
    now = timezone.now()
    step = dt.timedelta(days=days) / max(n_instances, 1)
    start = now - dt.timedelta(days=days)
    instances = [
        ContainerInstance(
            id=uuid.uuid4(),
            name=f"r{tag}-{i}",
            owner_id=owner_ids[i % len(owner_ids)],
            template_id=template.pk,
            runtime_id=runtime.pk,
            status=Status.RUNNING if i % 10 == 0 else Status.STOPPED,
            container_id=f"rows{tag}{i:x}",
            spec={"image": template.image, "name": "", "env": {}, "labels": {}, "mounts": []},
            created_at=start + step * i,
            status_changed_at=start + step * i,
            started_at=start + step * i,
            finished_at=None if i % 10 == 0 else start + step * i,
        )
        for i in range(n_instances)
    ]
    _copy(ContainerInstance, instances, using)

    def events():
        for row in instances:
            at = row.created_at
            yield ContainerEvent(
                instance_id=row.id, instance_name=row.name, owner_id=row.owner_id, kind="requested",
                to_status="pending", actor="user", created_at=at,
            )  # fmt: skip
            yield ContainerEvent(
                instance_id=row.id, instance_name=row.name, kind="transition",
                from_status="creating", to_status="running", actor="worker", created_at=at,
                owner_id=row.owner_id,
            )  # fmt: skip
            if row.status == Status.STOPPED:
                yield ContainerEvent(
                    instance_id=row.id, instance_name=row.name, kind="transition",
                    from_status="running", to_status="stopped", actor="user", created_at=at,
                    owner_id=row.owner_id,
                )  # fmt: skip
            else:
                yield ContainerEvent(
                    instance_id=row.id, instance_name=row.name, owner_id=row.owner_id, kind="note",
                    message="started", actor="worker", created_at=at,
                )  # fmt: skip

    n_events = _copy(ContainerEvent, events(), using)
    outbox = (
        OutboxEvent(
            kind="ContainerCreateRequest",
            queue="create",
            aggregate_id=str(row.id),
            fairness_key=str(row.owner_id),
            status=OutboxStatus.SENT,
            outcome="sent",
            available_at=row.created_at,
            created_at=row.created_at,
            sent_at=row.created_at,
            attempts=1,
        )  # fmt: skip
        for row in instances
    )
    n_outbox = _copy(OutboxEvent, outbox, using)
    runs = [
        DagRun(
            id=uuid.uuid4(),
            template_name="rows-dag",
            owner_id=row.owner_id,
            status="running" if i % 10 == 0 else "succeeded",
            created_at=row.created_at,
            status_changed_at=row.created_at,
        )  # fmt: skip
        for i, row in enumerate(instances[::20])
    ]
    n_runs = _copy(DagRun, runs, using)

    def dag_events():
        for run in runs:
            for kind in ("created", "transition"):
                yield DagEvent(run_id=run.id, kind=kind, actor="user", created_at=run.created_at)

    n_dag_events = _copy(DagEvent, dag_events(), using)
    with connections[using].cursor() as cursor:
        for model in (ContainerInstance, ContainerEvent, OutboxEvent, DagRun, DagEvent):
            cursor.execute(f"ANALYZE {connections[using].ops.quote_name(model._meta.db_table)}")
    return Made(n_instances, len(owner_ids), n_events, n_outbox, n_runs, n_dag_events)
