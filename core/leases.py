"""Leases and rates counted in the app's database, across every process and host.

A lease (``core.models.Lease``, ``key`` empty) is one place taken in a scope (an open
stream): it counts until ``expires_at`` unless its holder renews it, so a process killed
while holding it leaks nothing. ``lease_acquire`` admits a lease only under the scope's
limits (per holder, in total), exactly however many processes ask at once;
``lease_renew``, ``lease_release`` and ``leases_live`` are one statement each.

``rate_hit`` counts a holder's requests against a rate (the API throttles) on one row
per (scope, holder, rate), in one statement.

On PostgreSQL every time is the database server's (``statement_timestamp()``), the one
clock all hosts share, and the hot statements are prepared once per connection
(``core.prepared``); on SQLite (the quick start: one host) the same steps run through
the ORM on this process's clock, serialized by SQLite's write lock (``IMMEDIATE``).
Call these outside a transaction: ``lease_acquire`` holds its scope's lock until the
outermost commit.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from core import prepared
from core.errors import LeaseLimitReached
from core.models import Lease

#: Expired leases of its scope an acquire deletes at most (each acquire makes one row,
#: so the deletes keep up however many leases a killed process left behind).
REAP_LEASES = 100
#: Spent rate rows of its scope (other holders') a hit deletes at most.
REAP_RATES = 2


class LeaseScope(StrEnum):
    """The scopes gobrave counts in, each named once. A scope holds leases or rate rows,
    never both."""

    STREAM = "stream"  # open streams (log follow, live pages)
    THROTTLE_CREATE = "throttle:create"  # api.throttle_create
    THROTTLE_WRITE = "throttle:write"  # api.throttle_write


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _now():
    """The clock leases are compared on: the database's on PostgreSQL, this host's else."""
    return Now() if _postgres() else timezone.now()


# --- leases ---------------------------------------------------------------------------------

_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))"

# After the scope's lock (a statement of its own, so that this one's snapshot sees every
# lease the acquires before it committed), in one statement:
# 1. ``expired``: the scope's most recently expired leases (at most REAP_LEASES).
# 2. ``reaped``: those of them that are still expired, locked and deleted; one whose
#    renewal or release is under way (locked: skipped) or committed since the snapshot
#    (expired no more: re-checked) is not deleted,
# 3. ``live``: and counts as live, with every lease unexpired in the snapshot.
# 4. ``added``: the new lease, only when the holder's and the scope's counts are below
#    their limits (a NULL limit is none). The row returned says the counts and the lease.
_ACQUIRE = """
WITH expired AS (
    SELECT id, holder FROM {table}
    WHERE scope = %(scope)s AND expires_at <= statement_timestamp()
    ORDER BY expires_at DESC LIMIT {reap}
), reaped AS (
    DELETE FROM {table} WHERE id IN (
        SELECT id FROM {table}
        WHERE id IN (SELECT id FROM expired) AND expires_at <= statement_timestamp()
        FOR UPDATE SKIP LOCKED
    ) RETURNING holder
), live AS (
    SELECT
        CASE WHEN %(total)s::bigint IS NULL THEN 0 ELSE
            (SELECT count(*) FROM {table}
             WHERE scope = %(scope)s AND expires_at > statement_timestamp())
            + (SELECT count(*) FROM expired) - (SELECT count(*) FROM reaped)
        END AS total,
        CASE WHEN %(per_holder)s::bigint IS NULL THEN 0 ELSE
            (SELECT count(*) FROM {table}
             WHERE scope = %(scope)s AND holder = %(holder)s
             AND expires_at > statement_timestamp())
            + (SELECT count(*) FROM expired WHERE holder = %(holder)s)
            - (SELECT count(*) FROM reaped WHERE holder = %(holder)s)
        END AS mine
), added AS (
    INSERT INTO {table} (scope, holder, key, count, expires_at)
    SELECT %(scope)s, %(holder)s, '', 1, statement_timestamp() + %(ttl)s::interval
    FROM live
    WHERE (%(per_holder)s::bigint IS NULL OR live.mine < %(per_holder)s::bigint)
    AND (%(total)s::bigint IS NULL OR live.total < %(total)s::bigint)
    RETURNING id, expires_at
)
SELECT live.mine, added.id, added.expires_at FROM live LEFT JOIN added ON true
"""


def lease_acquire(
    *, scope: str, holder: str, ttl: float, per_holder: int | None, total: int | None
) -> Lease:
    """Take one lease in ``scope`` for ``holder``, live for ``ttl`` seconds unless renewed.

    Guarantees: only live (unexpired) leases count; the lease is made only if fewer than
    ``per_holder`` of the holder's and fewer than ``total`` of the scope's are live (None:
    no such limit), else ``LeaseLimitReached`` names the limit and nothing is made. Exact
    under any concurrency: acquires of one scope run one at a time (an advisory lock per
    scope on PostgreSQL, held to the commit; SQLite's write lock), and an expired lease
    whose renewal is still under way (its row locked) counts as live, so it is never
    over-admitted. Up to ``REAP_LEASES`` expired
    leases of the scope are deleted on the way (committed even when the lease is refused).
    Two statements on PostgreSQL; run outside a transaction, which it opens and commits.
    """
    if ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl}")
    with transaction.atomic():
        if _postgres():
            mine, made = _acquire_postgres(scope, holder, ttl, per_holder, total)
        else:
            mine, made = _acquire_orm(scope, holder, ttl, per_holder, total)
    if made is not None:
        return made
    if per_holder is not None and mine >= per_holder:
        raise LeaseLimitReached(scope=scope, limit="per_holder", number=per_holder)
    raise LeaseLimitReached(scope=scope, limit="total", number=total or 0)


def _acquire_postgres(scope, holder, ttl, per_holder, total) -> tuple[int, Lease | None]:
    if per_holder is not None or total is not None:
        prepared.execute(_LOCK, {"lock": f"lease:{scope}"})
    sql = _ACQUIRE.format(table=Lease._meta.db_table, reap=REAP_LEASES)
    params = {
        "scope": scope,
        "holder": holder,
        "ttl": dt.timedelta(seconds=ttl),
        "per_holder": per_holder,
        "total": total,
    }
    mine, pk, expires_at = prepared.execute(sql, params).fetchone()
    if pk is None:
        return mine, None
    return mine, _loaded(pk=pk, scope=scope, holder=holder, expires_at=expires_at)


def _acquire_orm(scope, holder, ttl, per_holder, total) -> tuple[int, Lease | None]:
    now = timezone.now()
    expired = Lease.objects.filter(scope=scope, expires_at__lte=now).order_by("-expires_at")
    Lease.objects.filter(pk__in=list(expired.values_list("pk", flat=True)[:REAP_LEASES])).delete()
    live = Lease.objects.filter(scope=scope, expires_at__gt=now)
    mine = live.filter(holder=holder).count() if per_holder is not None else 0
    if per_holder is not None and mine >= per_holder:
        return mine, None
    if total is not None and live.count() >= total:
        return mine, None
    made = Lease.objects.create(
        scope=scope, holder=holder, expires_at=now + dt.timedelta(seconds=ttl)
    )
    return mine, made


def _loaded(**fields) -> Lease:
    lease = Lease(key="", count=1, **fields)
    lease._state.adding, lease._state.db = False, connection.alias
    return lease


def lease_renew(*, lease_id: int, ttl: float) -> bool:
    """Keep a live lease for ``ttl`` seconds from now; one UPDATE, idempotent.

    False when the lease is not live any more (expired, reaped or released): it no longer
    counts, its place may have been taken, and the holder must acquire again (a stream
    ends). An expired lease is never revived.
    """
    if ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl}")
    now = _now()
    return bool(
        Lease.objects.filter(pk=lease_id, key="", expires_at__gt=now).update(
            expires_at=now + dt.timedelta(seconds=ttl)
        )
    )


def lease_release(*, lease_id: int) -> None:
    """Give a lease back at once (one DELETE); idempotent: a lease already gone is fine."""
    Lease.objects.filter(pk=lease_id, key="").delete()


def leases_live(*, scope: str, holder: str | None = None) -> int:
    """How many leases of ``scope`` (of ``holder``, if given) are live: one count over an
    index (scope, or scope and holder, then ``expires_at``)."""
    rows = Lease.objects.filter(scope=scope, expires_at__gt=_now())
    if holder is not None:
        rows = rows.filter(holder=holder)
    return rows.count()


# --- rates (the API throttles) --------------------------------------------------------------


class RateHit(NamedTuple):
    """A hit's answer: whether it is admitted, and if not, in how many seconds one would be."""

    allowed: bool
    retry_after: float | None = None


# GCRA (the generic cell rate algorithm: a token bucket in one timestamp). A holder's row
# keeps its theoretical arrival time (TAT) in ``expires_at``: a hit is admitted when the
# TAT is at most ``tolerance`` ahead of now, and moves it ``interval`` on (from now, if
# it lies behind). A row whose TAT has passed is spent: it means no more than no row.
# In one statement:
# 1. ``reaped``: delete up to REAP_RATES spent rows of the scope (other holders': the
#    holder's own row is the upsert's), skipping any row another statement holds.
# 2. ``hit``: insert the holder's row, or move its TAT if the hit is admitted (the row
#    lock of ON CONFLICT serializes hits of one holder from every process).
# 3. Admitted or not; and the TAT as the statement's snapshot saw it (for Retry-After).
_HIT = """
WITH reaped AS (
    DELETE FROM {table} WHERE id IN (
        SELECT id FROM {table}
        WHERE scope = %(scope)s AND expires_at < statement_timestamp()
        AND holder <> %(holder)s
        ORDER BY expires_at LIMIT {reap}
        FOR UPDATE SKIP LOCKED
    )
), hit AS (
    INSERT INTO {table} AS rate (scope, holder, key, count, expires_at)
    VALUES (%(scope)s, %(holder)s, %(key)s, 1, statement_timestamp() + %(interval)s::interval)
    ON CONFLICT (scope, holder, key) WHERE key <> '' DO UPDATE
    SET count = rate.count + 1,
        expires_at = GREATEST(rate.expires_at, statement_timestamp()) + %(interval)s::interval
    WHERE rate.expires_at <= statement_timestamp() + %(tolerance)s::interval
    RETURNING 1
)
SELECT EXISTS (SELECT FROM hit),
    (SELECT extract(epoch FROM expires_at - statement_timestamp()) FROM {table}
     WHERE scope = %(scope)s AND holder = %(holder)s AND key = %(key)s)
"""


def rate_hit(*, scope: str, holder: str, limit: int, period: float) -> RateHit:
    """Count one request of ``holder`` against ``limit`` requests per ``period`` seconds.

    Guarantees: the same answer whichever process or host asks (one row per scope,
    holder and rate, in the database); one statement on PostgreSQL, admitted or not.
    The rate is GCRA's (a token bucket): a burst of up to ``limit`` hits, then one every
    ``period / limit`` seconds, so over any span of ``s`` seconds at most
    ``limit * (1 + s / period)`` are admitted, and a holder who keeps asking gets exactly
    the rate. A refused hit costs nothing; ``retry_after`` is when the next would be
    admitted if no other hit came first. Spent rows are deleted by later hits of the scope.
    """
    interval = dt.timedelta(seconds=period / limit)
    tolerance = dt.timedelta(seconds=period) - interval
    key = f"{limit}/{period:g}s"
    if _postgres():
        sql = _HIT.format(table=Lease._meta.db_table, reap=REAP_RATES)
        params = {
            "scope": scope,
            "holder": holder,
            "key": key,
            "interval": interval,
            "tolerance": tolerance,
        }
        allowed, ahead = prepared.execute(sql, params).fetchone()
        if allowed:
            return RateHit(True)
        # None: the row was made after this statement's snapshot (a hit an instant ago).
        ahead = float(ahead) if ahead is not None else interval.total_seconds()
        return RateHit(False, max(ahead - tolerance.total_seconds(), 0.0))
    return _hit_orm(scope, holder, key, interval, tolerance)


def _hit_orm(scope, holder, key, interval, tolerance) -> RateHit:
    with transaction.atomic():
        now = timezone.now()
        spent = Lease.objects.filter(scope=scope, expires_at__lt=now).exclude(holder=holder)
        spent_ids = list(spent.order_by("expires_at").values_list("pk", flat=True)[:REAP_RATES])
        Lease.objects.filter(pk__in=spent_ids).delete()
        row = Lease.objects.filter(scope=scope, holder=holder, key=key)
        tat = row.values_list("expires_at", flat=True).first()
        if tat is None:
            Lease.objects.create(
                scope=scope, holder=holder, key=key, count=1, expires_at=now + interval
            )
            return RateHit(True)
        if tat - now > tolerance:
            return RateHit(False, (tat - now - tolerance).total_seconds())
        row.update(count=F("count") + 1, expires_at=max(tat, now) + interval)
        return RateHit(True)
