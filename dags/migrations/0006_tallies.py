"""PostgreSQL: DAG runs by status and finished node durations, kept by the writes.

``/metrics`` (``gobrave_dag_runs``, ``gobrave_dag_node_duration_seconds``) reads the
tallies ``dags.runs`` (key: the status) and ``dags.node_durations`` (key: ``"<status>
<bucket>"``, the bucket the index of the first of ``BOUNDS`` at or above the duration,
``len(BOUNDS)`` past the last; the tally's ``total`` sums the seconds) instead of
scanning every run and node run ever made. ``BOUNDS`` is ``dags.selectors.
NODE_DURATION_BOUNDS`` as it was when this ran (a test holds them equal): other bounds
need a migration that installs the trigger again. Nothing on SQLite.
"""

from django.db import migrations

from core.tallies import trigger_sql

BOUNDS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
SECONDS = "extract(epoch FROM finished_at - started_at)"
BUCKET = (
    f"(SELECT count(*) FROM unnest('{{{','.join(map(str, BOUNDS))}}}'::float8[]) AS b "
    f"WHERE b < {SECONDS})"
)

RUNS = trigger_sql(tally="dags.runs", table="dags_dagrun", key="status")
DURATIONS = trigger_sql(
    tally="dags.node_durations",
    table="dags_dagnoderun",
    key=f"status || ' ' || {BUCKET}",
    total=SECONDS,
    where="started_at IS NOT NULL AND finished_at IS NOT NULL",
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for sql, _drop in (RUNS, DURATIONS):
            schema_editor.execute(sql)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for _create, sql in (RUNS, DURATIONS):
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("dags", "0005_list_indexes"),
        ("core", "0003_tally"),
    ]

    operations = [migrations.RunPython(create, drop)]
