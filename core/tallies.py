"""Read and fold the ``Tally`` rows: counts kept current by the writes, not by a scan.

A trigger on the counted table (installed by the app's migration, PostgreSQL only)
appends a signed delta per statement and key: ``+n`` for rows that entered a key, ``-n``
for rows that left it, in the writer's transaction (a rolled-back change leaves no
delta). So a count is the sum of its deltas, exact at every snapshot, and a read costs
the deltas written since the last fold, not the rows counted.

``tallies_fold`` (the dispatcher's housekeeping, every ``FOLD_EVERY`` seconds) sums each
key's deltas into one row. ``DELETE ... RETURNING`` hands each delta to exactly one of
several dispatchers folding at once, and the sums go back in the same transaction, so no
count is lost or counted twice.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import Sum

from core import prepared
from core.models import Tally

FOLD_EVERY = 10.0  # seconds between folds in the dispatcher


def tallies_kept() -> bool:
    """Whether the database keeps tallies (PostgreSQL's triggers); elsewhere readers
    count the table itself (SQLite: the quick start, a few rows)."""
    return connection.vendor == "postgresql"


def tally_read(name: str) -> dict[str, tuple[int, float]]:
    """``{key: (n, total)}`` of tally ``name`` (keys whose count is 0 are left out).

    One grouped statement over the ``tally_name_key`` index: its cost is the keys and
    the deltas since the last fold, never the counted table. Compiled once, a prepared
    statement on PostgreSQL (``core.prepared.rows``): placement reads the instance tally
    under the capacity gate, on every create among several engines."""
    rows = prepared.rows(("tally_read",), _grouped, name=name)
    return {key: (int(n), float(total or 0.0)) for key, n, total in rows if n}


def _grouped(name: str):
    """``tally_read``'s grouped query."""
    return (
        Tally.objects.filter(name=name)
        .order_by()
        .values_list("key")
        .annotate(n_sum=Sum("n"), total_sum=Sum("total"))
        .values_list("key", "n_sum", "total_sum")
    )


def tallies_fold() -> int:
    """Sum every key's deltas into one row; returns how many delta rows went.

    One short transaction; safe beside writers (their new deltas stay) and beside other
    folds (each delta is deleted, and re-added as part of a sum, by exactly one)."""
    table = connection.ops.quote_name(Tally._meta.db_table)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} RETURNING name, key, n, total")
            deleted = cursor.fetchall()
        sums: dict[tuple[str, str], list] = {}
        for name, key, n, total in deleted:
            acc = sums.setdefault((name, key), [0, 0.0])
            acc[0] += n
            acc[1] += total
        Tally.objects.bulk_create(
            Tally(name=name, key=key, n=n, total=total)
            for (name, key), (n, total) in sums.items()
            if n or total
        )
    return len(deleted)


# --- the triggers (each app's migration installs its own with these) ------------------------


def trigger_sql(*, tally: str, table: str, key: str, total: str = "0", where: str = "true"):
    """``(create, drop)`` SQL for the triggers that keep tally ``tally`` over ``table``.

    ``key`` and ``total`` are SQL expressions over one row (``total``: what the tally
    sums beside its count), ``where`` which rows count. Statement-level triggers with
    transition tables: one grouped INSERT per statement, however many rows it touched
    (a bulk load of a million rows adds a delta per key, not per row). An UPDATE that
    moves no row between keys (most: a node name, a reason) appends nothing; a TRUNCATE
    of the table empties the tally.
    """
    fn = f"gobrave_tally_{table}"

    def rows(sign: str, source: str) -> str:
        return (
            f"SELECT ({key})::text AS k, ({total})::float8 AS t, {sign} AS d "
            f"FROM {source} WHERE {where}"
        )

    def insert(selected: str) -> str:
        return (
            f"INSERT INTO core_tally (name, key, n, total) SELECT '{tally}', k, sum(d), "
            f"sum(d * t) FROM ({selected}) AS x GROUP BY k HAVING sum(d) <> 0 OR sum(d * t) <> 0"
        )

    news, olds = rows("1", "new_rows"), rows("-1", "old_rows")
    create = f"""
CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {insert(news)};
    ELSIF TG_OP = 'DELETE' THEN
        {insert(olds)};
    ELSE
        {insert(olds + " UNION ALL " + news)};
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION {fn}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Wait out a fold under way (its sums commit after this statement's snapshot would be
    -- taken): the DELETE below then sees them, with a snapshot of its own.
    LOCK TABLE core_tally IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM core_tally WHERE name = '{tally}';
    RETURN NULL;
END
$$;
CREATE TRIGGER {fn}_trunc AFTER TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION {fn}_truncate();
CREATE TRIGGER {fn}_ins AFTER INSERT ON {table}
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
CREATE TRIGGER {fn}_upd AFTER UPDATE ON {table}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
CREATE TRIGGER {fn}_del AFTER DELETE ON {table}
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {fn}();
DELETE FROM core_tally WHERE name = '{tally}';
INSERT INTO core_tally (name, key, n, total)
    SELECT '{tally}', k, count(*), sum(t) FROM (
        SELECT ({key})::text AS k, ({total})::float8 AS t FROM {table} WHERE {where}
    ) AS x GROUP BY k;
"""
    drop = f"""
DROP TRIGGER IF EXISTS {fn}_ins ON {table};
DROP TRIGGER IF EXISTS {fn}_upd ON {table};
DROP TRIGGER IF EXISTS {fn}_del ON {table};
DROP TRIGGER IF EXISTS {fn}_trunc ON {table};
DROP FUNCTION IF EXISTS {fn}();
DROP FUNCTION IF EXISTS {fn}_truncate();
DELETE FROM core_tally WHERE name = '{tally}';
"""
    return create, drop
