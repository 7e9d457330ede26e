"""Helpers for tests of the events feed: entries committed, and waiting until the feed's
horizon (``core.write_order``) has passed them."""

from __future__ import annotations

import time
import uuid

from django.db import connection

from containers.models import ContainerEvent, RuntimeEvent
from core.write_order import HORIZON_SQL
from dags.models import DagEvent

DEADLINE = 30.0  # a transaction of this database still open holds the horizon back


def settled(deadline: float = DEADLINE) -> None:
    """Wait until every entry committed so far lies below the horizon: until then the feed
    rightly holds back entries of transactions younger than the oldest one running."""
    if connection.vendor != "postgresql":
        return
    top = max(
        model.objects.order_by("-txid").values_list("txid", flat=True).first() or 0
        for model in (ContainerEvent, DagEvent, RuntimeEvent)
    )
    end = time.monotonic() + deadline
    with connection.cursor() as cursor:
        while True:
            cursor.execute(HORIZON_SQL)
            (horizon,) = cursor.fetchone()
            if horizon > top:
                return
            if time.monotonic() > end:
                cursor.execute(
                    "SELECT pid, datname, state, backend_xid, xact_start, left(query, 80) "
                    "FROM pg_stat_activity WHERE backend_xid IS NOT NULL "
                    "AND datname = current_database()"
                )
                raise AssertionError(
                    f"horizon {horizon} never passed {top}; running: {cursor.fetchall()}"
                )
            time.sleep(0.02)


def engine_event(*, name="far", kind="engine.cordoned", actor="user:ev-root", **fields):
    """One engine history entry, committed (outside any transaction) or in the caller's."""
    return RuntimeEvent.objects.create(
        runtime_id=fields.pop("runtime_id", 0), runtime_name=name, kind=kind, actor=actor, **fields
    )


def event(*, owner=None, instance_id=None, kind="transition", actor="worker", **fields):
    """One instance history entry, committed (outside any transaction)."""
    return ContainerEvent.objects.create(
        instance_id=instance_id or uuid.uuid4(),
        instance_name=fields.pop("instance_name", "inst"),
        owner=owner,
        kind=kind,
        actor=actor,
        **fields,
    )
