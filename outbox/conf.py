"""The relay's settings (``settings.OUTBOX``), with derived lease and in-flight limits."""

from __future__ import annotations

import datetime as dt
import math
import weakref

from django.conf import settings

from outbox import registry

NOTIFY_CHANNEL = "gobrave_outbox"


def value(key: str):
    return settings.OUTBOX[key]


def database_broker() -> bool:
    """True when the clusters' broker is gobrave's own (``outbox.broker``: PostgreSQL and
    ``queue.broker: orm``): the claim is the hand-off, and each cluster's pusher beats."""
    return getattr(settings, "Q_CLUSTER", {}).get("broker_class") == "outbox.broker.OutboxBroker"


def lease() -> dt.timedelta:
    """How long a started handler holds its claim: the delivery timeout plus a margin."""
    return dt.timedelta(seconds=value("delivery_timeout") + value("lease_margin"))


def liveness() -> dt.timedelta:
    """How soon a dead worker's started row is due again (see ``outbox.heartbeat``)."""
    return dt.timedelta(seconds=value("liveness_timeout"))


def started_lease() -> dt.timedelta:
    """The lease a handler starts with, renewed while it runs: at most ``lease()``."""
    return min(liveness(), lease())


def claim_lease(queue: str) -> dt.timedelta:
    """How long a claim holds before its handler starts.

    A claimed row may wait behind ``prefetch`` others for a worker, each taking at most
    ``delivery_timeout``; the lease covers that wait, so a prefetched row is never handed
    out twice. ``relay.begin()`` restarts the lease at ``lease()`` when the handler starts.
    """
    workers = registry.queues().get(queue, 1)
    waits = math.ceil(value("prefetch") / workers)
    return dt.timedelta(seconds=value("delivery_timeout") * (1 + waits) + value("lease_margin"))


CHAIN_MAX = 2.0  # seconds: the longest a task goes on chaining rows (``outbox.chain``)
CHAIN_SAFETY = 0.25  # seconds between a chained row's start and django-q2's timeout, at least


def chain_budget(worker_timeout: float | None) -> float:
    """How long after a django-q2 task began its worker may still begin a chained row.

    As long as the worker's timeout (``worker_timeout``, django-q2's ``timeout``: the task
    is cut there) leaves that row its whole ``delivery_timeout``, and no longer than
    ``CHAIN_MAX``; 0 (no chaining) when it leaves none. A cluster without a timeout
    chains for ``CHAIN_MAX``.
    """
    if worker_timeout is None or worker_timeout <= 0:
        return CHAIN_MAX
    room = worker_timeout - value("delivery_timeout") - CHAIN_SAFETY
    return max(0.0, min(CHAIN_MAX, room))


def in_flight_limit(queue: str) -> int:
    """At most this many rows of ``queue`` in ``processing`` at once.

    The queue's worker count plus ``prefetch`` (0 by default: a backlog waits in the
    outbox, not in the worker queue). ``max_in_flight`` caps the total of all queues.
    """
    return registry.queues().get(queue, 1) + value("prefetch")


def is_postgres(connection) -> bool:
    return connection.vendor == "postgresql"


def limit_statements(connection) -> None:
    """Cancel any statement of the current transaction that runs past ``write_timeout``.

    ``SET LOCAL``: it ends with the transaction. Only for the relay's own writes of an
    outcome or a lease, never for the claim or the admission gate, which must wait.
    """
    if is_postgres(connection):
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL statement_timeout = {int(value('write_timeout') * 1000)}")


# The worker connections already set up (``worker_session``): one SET per connection.
_worker_connections: weakref.WeakSet = weakref.WeakSet()


def worker_session(connection) -> None:
    """Set up a django-q2 worker's connection: its commits do not wait for the WAL flush.

    Everything a worker writes is redone if it is lost: a crashed database server loses
    only the last commits (a suffix: what is kept is a consistent earlier state), and a
    lost ``begin``, handler step or outcome leaves the row as a worker that died at that
    point would (due again; the handler is idempotent; contract §3). A request's own
    commit (the API, the admin) stays synchronous: its answer says it is recorded.
    Once per connection (a pooled one keeps the setting); PostgreSQL only.
    """
    if not is_postgres(connection):
        return
    connection.ensure_connection()
    raw = connection.connection
    if raw in _worker_connections:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
    _worker_connections.add(raw)
