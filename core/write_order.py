"""Reading the rows of concurrent writers without missing one: a row's transaction id,
and the horizon below which no row can still appear.

Ids (and ``created_at``) are taken when a row is inserted, not when its transaction
commits, so a reader that pages by id can pass a row whose transaction commits later:
it never sees it. PostgreSQL knows better. Each row stores the id of the transaction
that wrote it (``txid``, the column default ``pg_current_xact_id()``), and a reader
serves only rows whose transaction is older than the oldest transaction of this database
still running (the *horizon*: ``pg_current_snapshot()``'s running transactions, less
those ``pg_stat_activity`` places in other databases). Every such transaction
has ended, so the set of rows below the horizon is final: nothing committed later can
join it, since a transaction that writes later gets a newer id. Ordered by ``(txid,
id)``, a reader that follows its position upwards therefore sees every row once, also
the rows of transactions that commit late. The order is the transactions' (the order in
which PostgreSQL numbered them, when each first wrote), not their commits': a
transaction that began writing first and committed last is served first. The price: a
row is served only once every transaction of the database older than its own has ended
(a session left ``idle in transaction`` holds the feed back; ``docs/operations.md``,
"Events API").

On SQLite every row's ``txid`` is 0 and there is no horizon: its writers are serialized
by the database lock, so ids are already in commit order and need no horizon.
"""

from __future__ import annotations

from django.db import connection, models

# xid8 has no cast to bigint; its text form is the 64-bit (epoch-extended) number.
_CURRENT = "(pg_current_xact_id()::text::bigint)"


class TransactionId(models.Func):
    """The id of the writing transaction: the ``txid`` column's database default."""

    template = _CURRENT
    output_field = models.BigIntegerField()

    def as_sqlite(self, compiler, connection, **extra):
        return "0", []


# The horizon: the oldest transaction still running *in this database* (a session works
# in one database only, so another database's transactions never write our rows; they
# must not hold our readers back, whether they are another application's or another
# test's). Every transaction running at the statement's snapshot (``xip``) counts unless
# ``pg_stat_activity`` shows it belongs to another database; one it cannot place (a
# prepared transaction, a hidden row) counts too, and so does the reader's own (a
# snapshot does not list it). None running: the snapshot's ``xmax``.
HORIZON_SQL = """
WITH snap AS (SELECT pg_current_snapshot() AS s)
SELECT least(
    (SELECT pg_snapshot_xmax(s)::text::bigint FROM snap),
    pg_current_xact_id_if_assigned()::text::bigint,
    (SELECT min(x::text::bigint) FROM snap, pg_snapshot_xip(s) AS x
     WHERE NOT EXISTS (
        SELECT 1 FROM pg_stat_activity a
        WHERE a.backend_xid::text = (x::text::bigint % 4294967296)::text
          AND a.datname IS DISTINCT FROM current_database())))
"""


def horizon() -> int | None:
    """Rows with a lower ``txid`` were written by transactions that have all ended, so
    the set of them is final (None on SQLite: no horizon needed). One statement."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(HORIZON_SQL)
        return cursor.fetchone()[0]


def txid_field() -> models.BigIntegerField:
    """The ``txid`` column of a table read in transaction order (see the module's text)."""
    return models.BigIntegerField(
        db_default=TransactionId(),
        editable=False,
        help_text="The writing transaction's id (core.write_order): the order readers follow.",
    )


def add_txid_sql(vendor: str, table: str) -> list[str]:
    """Add ``txid`` to an existing ``table`` without rewriting it: old rows get 0 (their
    transactions ended long ago), new rows the default. Both statements only change the
    catalog on PostgreSQL (a constant default, then the default for new rows)."""
    add = f'ALTER TABLE "{table}" ADD COLUMN "txid" bigint DEFAULT 0 NOT NULL'
    if vendor != "postgresql":
        return [add]
    return [add, f'ALTER TABLE "{table}" ALTER COLUMN "txid" SET DEFAULT {_CURRENT}']
