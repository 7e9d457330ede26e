"""The claim's reads and writes on PostgreSQL as prepared statements: the lock, one
statement to count and pick, one to take (``relay.claim`` calls these; SQLite runs its ORM
steps).

A profile of the claim (``docs/benchmarks.md``) found most of its time in Python building
the same ORM queries on every claim, one per fairness key, and a second and third
statement for the counters of reclaimed rows. The SQL below is written once; what it
selects and writes is what ``relay.claim`` documents, step by step:

- ``PICK``: after the claimers' advisory lock (``LOCK``, a statement of its own, so that
  the pick's snapshot follows it), the room (the queue's in-flight limit less its live rows,
  within ``max_in_flight`` less the live rows of every queue, at most ``limit``), then
  up to room rows: lease-expired ``processing`` rows first (oldest first), then due
  ``pending`` rows round-robin by fairness key: the keys in turn order (never served
  first, then least recently served; ties by key), each key's oldest unblocked rows
  ranked, every key's first row, then every key's second, cut at room. No row has an
  older unfinished row of its aggregate. Rows are locked ``FOR UPDATE SKIP LOCKED``:
  expired ones as they are found, pending ones once picked (the pick reads at most room
  rows a key, and locks only those it returns; one locked by another transaction is
  left for the next claim). Each pending row comes with its key's turn (NULL: never
  served), and every row with the queue's last turn.
- ``TAKE``: the picked rows ``processing`` under the claim's token and lease (a
  compare-and-set on the state machine's sources, as ``OutboxQuerySet.move_to``); a row
  reclaimed after its handler had begun counts an attempt, one reclaimed before any
  worker began it counts a reclaim, each with its reason in ``last_error``.
- ``MARK``: the served keys' next turns (an upsert per key).

Written by hand because the ORM cannot write them: a recursive CTE (the loose index scan
of ``DUE_KEYS``), ``FOR UPDATE SKIP LOCKED`` inside CTEs, a LATERAL join, an UPDATE whose
counters are ``CASE`` expressions over the row's old values, an upsert from ``unnest``.
The ORM's steps (``relay._pick``, SQLite's path) took 60.9 ms a claim on PostgreSQL
against 3.3 ms for these (``bench/prepared_statements.py``, mode D; ``core/prepared.py``).
"""

from __future__ import annotations

import datetime as dt
import uuid

from core import prepared
from outbox.models import FairnessMark, OutboxEvent, sources_of

_T = OutboxEvent._meta.db_table
_MARKS = FairnessMark._meta.db_table
CLAIM_LOCK = "hashtext('outbox:claim')"  # the claimers' advisory lock (``outbox.chain`` shares it)
CRASHED = "lease expired while the handler ran"
UNSTARTED = " times and never begun by a worker: is its cluster wedged or gone?"


def sources(target: str) -> str:
    """The statuses the state machine allows ``target`` from, as an SQL list."""
    return ", ".join(f"'{status}'" for status in sources_of(target))


# No older unfinished row of the same aggregate (``e``: the row looked at).
UNBLOCKED = f"""NOT EXISTS (SELECT 1 FROM {_T} o WHERE o.aggregate_id = e.aggregate_id
    AND o.id < e.id AND o.status IN ('pending', 'processing'))"""

# Serialize claimers. The claim commits without waiting for its WAL flush: a claim lost
# with a crashed server only puts its rows back to what they were. The writes that depend
# on it (``relay.begin()``, the handler's, the outcome) come later in the log, so a crash
# that loses the claim loses them too; a worker's commits do not wait for the flush either
# (``conf.worker_session``).
LOCK = f"""SELECT set_config('synchronous_commit', 'off', true),
       pg_advisory_xact_lock({CLAIM_LOCK})"""

# The distinct fairness keys of the queue's due pending rows, one index probe per key (a
# loose index scan on outbox_pending_by_key), however many rows each key has: a CTE
# ``due(key)`` whose last row is NULL (``outbox.chain`` picks with it too).
DUE_KEYS = f"""due(key) AS (
    (SELECT fairness_key FROM {_T}
      WHERE queue = %(queue)s AND status = 'pending' AND available_at <= STATEMENT_TIMESTAMP()
      ORDER BY fairness_key LIMIT 1)
    UNION ALL
    SELECT (SELECT e.fairness_key FROM {_T} e
             WHERE e.queue = %(queue)s AND e.status = 'pending'
               AND e.available_at <= STATEMENT_TIMESTAMP() AND e.fairness_key > due.key
             ORDER BY e.fairness_key LIMIT 1)
      FROM due WHERE due.key IS NOT NULL
)"""

PICK = f"""
WITH RECURSIVE {DUE_KEYS}, room AS (
    SELECT GREATEST(0, LEAST(
        %(limit)s::int,
        %(queue_limit)s::int - count(*) FILTER (WHERE queue = %(queue)s),
        CASE WHEN %(cap)s::int > 0 THEN %(cap)s::int - count(*) ELSE %(limit)s::int END
    )) AS n
    FROM {_T} WHERE status = 'processing' AND lease_expires_at >= STATEMENT_TIMESTAMP()
), expired AS (
    SELECT e.id, e.status, e.started_at, e.fairness_key, e.aggregate_id
    FROM {_T} e
    WHERE e.queue = %(queue)s AND e.status = 'processing'
      AND e.lease_expires_at < STATEMENT_TIMESTAMP() AND {UNBLOCKED}
    ORDER BY e.id LIMIT (SELECT n FROM room) FOR UPDATE SKIP LOCKED
), keys AS (
    SELECT due.key, mark.turn,
           row_number() OVER (ORDER BY COALESCE(mark.turn, 0), due.key) AS place
    FROM due LEFT JOIN {_MARKS} mark ON mark.queue = %(queue)s AND mark.key = due.key
    WHERE due.key IS NOT NULL
), ranked AS (
    SELECT c.id, k.turn, c.rank, k.place FROM keys k CROSS JOIN LATERAL (
        SELECT e.id, row_number() OVER (ORDER BY e.id) AS rank FROM (
            SELECT e.id FROM {_T} e
            WHERE e.queue = %(queue)s AND e.status = 'pending'
              AND e.available_at <= STATEMENT_TIMESTAMP() AND e.fairness_key = k.key
              AND {UNBLOCKED}
            ORDER BY e.id LIMIT (SELECT n FROM room)) e
    ) c
    ORDER BY c.rank, k.place
    LIMIT GREATEST(0, (SELECT n FROM room) - (SELECT count(*) FROM expired))
), pending AS (
    SELECT e.id, e.status, e.started_at, e.fairness_key, e.aggregate_id
    FROM {_T} e
    WHERE e.id IN (SELECT id FROM ranked) AND e.status = 'pending'
      AND e.available_at <= STATEMENT_TIMESTAMP()
    FOR UPDATE SKIP LOCKED
)
SELECT picked.id, picked.status, picked.started_at, picked.fairness_key, picked.aggregate_id,
       picked.turn, (SELECT max(turn) FROM {_MARKS} WHERE queue = %(queue)s)
FROM (
    SELECT expired.*, NULL::bigint AS turn, 0::bigint AS rank, 0::bigint AS place, 0 AS part
    FROM expired
    UNION ALL
    SELECT pending.*, ranked.turn, ranked.rank, ranked.place, 1 AS part
    FROM pending JOIN ranked USING (id)
) picked
ORDER BY picked.part, picked.rank, picked.place, picked.id
"""

_REUSED = "e.status = 'processing' AND e.started_at IS NOT NULL"
_UNBEGUN = "e.status = 'processing' AND e.started_at IS NULL"
TAKE = f"""
UPDATE {_T} e SET status = 'processing', claim_token = %(token)s,
    lease_expires_at = STATEMENT_TIMESTAMP() + %(lease)s, started_at = NULL,
    attempts = e.attempts + CASE WHEN {_REUSED} THEN 1 ELSE 0 END,
    reclaims = e.reclaims + CASE WHEN {_UNBEGUN} THEN 1 ELSE 0 END,
    last_error = CASE WHEN {_REUSED} THEN '{CRASHED}'
                      WHEN {_UNBEGUN} THEN 'claimed ' || (e.reclaims + 1) || '{UNSTARTED}'
                      ELSE e.last_error END
WHERE e.id = ANY(%(ids)s) AND e.status IN ({sources("processing")})
"""

MARK = f"""
INSERT INTO {_MARKS} (queue, key, turn, served_at)
SELECT %(queue)s, key, turn, STATEMENT_TIMESTAMP()
FROM unnest(%(keys)s::text[], %(turns)s::bigint[]) AS served(key, turn)
ON CONFLICT (queue, key) DO UPDATE SET turn = EXCLUDED.turn, served_at = EXCLUDED.served_at
"""


def pick(
    queue: str, limit: int, *, queue_limit: int, cap: int
) -> tuple[list[tuple], dict[str, int], int]:
    """``LOCK``, then ``PICK``: the rows as ``relay.ROW_FIELDS`` in claim order, the picked
    keys' turns (keys never served left out) and the queue's last turn."""
    prepared.execute(LOCK)
    params = {"queue": queue, "limit": limit, "queue_limit": queue_limit, "cap": cap or 0}
    found = prepared.execute(PICK, params).fetchall()
    rows = [tuple(row[:5]) for row in found]
    turns = {row[3]: row[5] for row in found if row[5] is not None}
    return rows, turns, (found[0][6] if found else 0) or 0


def take(ids: list[int], token: uuid.UUID, lease: dt.timedelta) -> None:
    """``TAKE`` for the rows ``ids``."""
    prepared.execute(TAKE, {"ids": ids, "token": token, "lease": lease})


def mark(queue: str, turns: dict[str, int]) -> None:
    """``MARK``: each key of ``turns`` gets its turn."""
    prepared.execute(MARK, {"queue": queue, "keys": list(turns), "turns": list(turns.values())})
