"""The lifecycle's hot statements (prepared on PostgreSQL): ``instance_lock`` (every request
and handler step locks and reads its instance with it), ``instance_save`` (every move),
``record`` (every history entry), ``move`` (both at once) and ``container_id_record``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.conf import settings
from django.db import connection, transaction

from containers.models import ContainerEvent, ContainerInstance
from containers.requests.lifecycle import (
    container_id_record,
    instance_lock,
    move,
    moves_deferred,
    record,
)
from tests.factories import InstanceFactory, RequestFactory


@contextmanager
def other_connection() -> Iterator[psycopg.Connection]:
    """A second connection to the test database, outside Django's."""
    db = settings.DATABASES["default"]
    other = psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=connection.settings_dict["NAME"]
    )
    try:
        yield other
    finally:
        other.close()


def lockable(other: psycopg.Connection, probe: str, params: list) -> bool:
    """Whether ``other`` can lock the row now (``probe``: ``SELECT 1 ... FOR UPDATE
    NOWAIT``); the lock, if taken, is let go at once."""
    try:
        return other.execute(probe, params).fetchone() == (1,)
    except psycopg.errors.LockNotAvailable:
        return False
    finally:
        other.rollback()


@pytest.mark.django_db
def test_reads_the_instance_as_the_orm_does_and_its_runtime_in_one_query(
    postgres, django_assert_num_queries
):
    made = InstanceFactory(status="running", exit_code=None)
    orm = ContainerInstance.objects.select_related("runtime").get(pk=made.pk)
    with django_assert_num_queries(1):
        locked = instance_lock(str(made.pk), with_runtime=True)
        runtime = locked.runtime
    fields = [f.attname for f in ContainerInstance._meta.concrete_fields]
    assert {f: getattr(locked, f) for f in fields} == {f: getattr(orm, f) for f in fields}
    assert isinstance(locked.spec, dict) and locked.spec == orm.spec
    assert (runtime.pk, runtime.name, runtime.labels) == (
        orm.runtime.pk,
        orm.runtime.name,
        orm.runtime.labels,
    )


@pytest.mark.django_db
def test_an_unknown_or_malformed_id_reads_nothing(postgres):
    assert instance_lock("00000000-0000-0000-0000-000000000001") is None
    with pytest.raises(ValueError):
        instance_lock("not-a-uuid")


@pytest.mark.django_db(transaction=True)
def test_the_row_stays_locked_until_the_transaction_ends(postgres):
    made = InstanceFactory()
    probe = f"SELECT 1 FROM {ContainerInstance._meta.db_table} WHERE id = %s FOR UPDATE NOWAIT"
    with other_connection() as other:
        with transaction.atomic():
            assert instance_lock(made.pk) is not None
            assert not lockable(other, probe, [made.pk])
        assert lockable(other, probe, [made.pk])


@pytest.mark.django_db
def test_a_history_entry_is_stored_as_returned(postgres):
    instance = InstanceFactory()
    data = {"event": "die", "exit_code": 3, "nested": {"list": [1, "two", None]}}
    entry = record(instance, kind="note", actor="t", message="m", to_status="running", data=data)
    stored = ContainerEvent.objects.get(pk=entry.pk)
    fields = [f.attname for f in ContainerEvent._meta.concrete_fields]
    assert {f: getattr(entry, f) for f in fields} == {f: getattr(stored, f) for f in fields}
    assert stored.data == data and stored.instance_id == instance.pk


@pytest.mark.django_db
def test_a_move_saves_what_its_transition_set(postgres):
    instance = InstanceFactory(status="running")
    with transaction.atomic():
        locked = instance_lock(instance.pk)
        move(locked, "failed", actor="t", reason="it broke", exit_code=7)
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.status_reason, stored.exit_code) == ("failed", "it broke", 7)
    assert stored.finished_at is not None and stored.status_changed_at == locked.status_changed_at


@pytest.mark.django_db
def test_a_move_and_its_history_entry_are_one_statement(postgres):
    """The state change and its history entry go to the server together (one prepared
    statement, the UPDATE in a CTE), and both are stored as the ORM would read them."""
    from django.test.utils import CaptureQueriesContext

    instance = InstanceFactory(status="running")
    with transaction.atomic():
        locked = instance_lock(instance.pk)
        with CaptureQueriesContext(connection) as seen:
            move(locked, "stopped", actor="t", message="asked", exit_code=0)
    statements = [q["sql"] for q in seen.captured_queries]
    assert len(statements) == 1 and statements[0].startswith("WITH updated AS (UPDATE"), statements
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.status, stored.exit_code) == ("stopped", 0)
    entry = ContainerEvent.objects.get(instance_id=instance.pk, to_status="stopped")
    assert (entry.from_status, entry.message, entry.actor) == ("running", "asked", "t")


@pytest.mark.django_db
def test_deferred_moves_are_written_at_the_blocks_end_in_two_statements(postgres):
    """Inside ``moves_deferred`` a move is made in memory only; at the end every row and
    every history entry is written (one statement each, for all of them), a row moved
    twice with its last state; a block that raises writes none of them."""
    from django.test.utils import CaptureQueriesContext

    one, two = InstanceFactory(status="running"), InstanceFactory(status="creating")
    with transaction.atomic():
        first, second = instance_lock(one.pk), instance_lock(two.pk)
        with CaptureQueriesContext(connection) as seen, moves_deferred():
            move(first, "stopped", actor="t", message="exited", exit_code=0)
            move(second, "running", actor="t", message="started")
            move(second, "failed", actor="t", reason="it broke", exit_code=3)
            unwritten = list(
                ContainerInstance.objects.filter(pk__in=[one.pk, two.pk])
                .order_by("status")
                .values_list("status", flat=True)
            )
        assert unwritten == ["creating", "running"], unwritten
        writes = [" ".join(q["sql"].split()[:3]) for q in seen.captured_queries[1:3]]
        assert writes == ["3 times: UPDATE", "3 times: INSERT"], seen.captured_queries
    rows = {r.pk: r for r in ContainerInstance.objects.filter(pk__in=[one.pk, two.pk])}
    assert (rows[one.pk].status, rows[one.pk].exit_code) == ("stopped", 0), rows[one.pk]
    assert (rows[two.pk].status, rows[two.pk].status_reason, rows[two.pk].exit_code) == (
        "failed",
        "it broke",
        3,
    ), rows[two.pk].status_reason
    entries = ContainerEvent.objects.filter(instance_id__in=[one.pk, two.pk]).order_by("id")
    moves = [(e.instance_id, e.from_status, e.to_status) for e in entries]
    assert moves == [
        (one.pk, "running", "stopped"),
        (two.pk, "creating", "running"),
        (two.pk, "running", "failed"),
    ], moves

    three = InstanceFactory(status="running")
    with pytest.raises(RuntimeError), transaction.atomic():
        locked = instance_lock(three.pk)
        with moves_deferred():
            move(locked, "stopped", actor="t", exit_code=0)
            raise RuntimeError("the batch failed")
    assert ContainerInstance.objects.get(pk=three.pk).status == "running"
    assert not ContainerEvent.objects.filter(instance_id=three.pk).exists()


@pytest.mark.django_db
def test_a_container_id_is_recorded_only_in_the_state_and_on_the_runtime_asked(postgres):
    instance = InstanceFactory(status="creating")
    args = {"instance_id": instance.pk, "runtime_id": "abc", "node": "host-1"}
    assert not container_id_record(**args, placed_on=instance.runtime_id, status="starting")
    # Placed again on another runtime since: a container of the old engine is not its own.
    assert not container_id_record(**args, placed_on=instance.runtime_id + 1, status="creating")
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.container_id, stored.runtime_node_name) == ("", "")
    args["placed_on"] = instance.runtime_id
    assert container_id_record(**args, status="creating")
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert (stored.container_id, stored.runtime_node_name) == ("abc", "host-1")


@pytest.mark.django_db
def test_an_update_saves_the_fields_named_and_their_auto_now(postgres, fake_runtime):
    from containers.models import MonitorCursor
    from core import prepared

    cursor = MonitorCursor.objects.create(runtime=fake_runtime)
    before = cursor.updated_at
    cursor.position, cursor.seen = "123", ["a", "b"]
    assert prepared.update(cursor, ("position", "seen", "updated_at")) == 1
    stored = MonitorCursor.objects.get(pk=cursor.pk)
    assert (stored.position, stored.seen) == ("123", ["a", "b"])
    assert stored.updated_at == cursor.updated_at > before
    MonitorCursor.objects.filter(pk=cursor.pk).delete()
    assert prepared.update(cursor, ("position",)) == 0


@pytest.mark.django_db
def test_a_request_is_unfinished_while_a_row_of_it_is_pending_or_processing(postgres):
    from containers.execution.sync import request_unfinished
    from outbox.models import OutboxEvent

    instance = InstanceFactory()
    assert not request_unfinished(instance.pk)
    row = RequestFactory(instance=instance)
    other = InstanceFactory()  # compiled once: each call's instance is its own
    for status, unfinished in (("pending", True), ("processing", True), ("sent", False)):
        OutboxEvent.objects.filter(pk=row.pk).update(status=status)
        assert request_unfinished(instance.pk) is unfinished, status
        assert request_unfinished(str(other.pk)) is False, status


@pytest.mark.django_db(transaction=True)
def test_a_gate_is_locked_in_one_statement_until_the_transaction_ends(postgres):
    from django.test.utils import CaptureQueriesContext

    from containers.models import Gate
    from containers.requests.lifecycle import _gate_locked

    Gate.objects.get_or_create(name="capacity")
    probe = f"SELECT 1 FROM {Gate._meta.db_table} WHERE name = %s FOR UPDATE NOWAIT"
    with other_connection() as other:
        with transaction.atomic():
            with CaptureQueriesContext(connection) as seen:
                assert _gate_locked("capacity")
            assert len(seen.captured_queries) == 1
            assert not lockable(other, probe, ["capacity"])
            assert not _gate_locked("no-such-gate")
        assert lockable(other, probe, ["capacity"])


@pytest.mark.django_db
def test_the_instances_in_a_slot_are_read_in_one_statement(postgres):
    from django.test.utils import CaptureQueriesContext

    from containers.requests.lifecycle import _in_slots

    creating, starting = InstanceFactory(status="creating"), InstanceFactory(status="starting")
    pending, missing = InstanceFactory(status="pending"), "00000000-0000-4000-8000-000000000001"
    asked = [str(creating.pk), str(pending.pk), missing, str(starting.pk)]
    with CaptureQueriesContext(connection) as seen:
        assert _in_slots(asked) == {str(creating.pk), str(starting.pk)}
    assert len(seen.captured_queries) == 1
    assert _in_slots([str(pending.pk)]) == set() and _in_slots([]) == set()
    assert _in_slots([str(starting.pk), str(starting.pk)]) == {str(starting.pk)}


@pytest.mark.django_db
def test_the_lock_with_its_runtime_locks_only_the_instance(postgres):
    from django.test.utils import CaptureQueriesContext

    made = InstanceFactory()
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        instance_lock(made.pk, with_runtime=True)
    (statement,) = [q["sql"] for q in seen.captured_queries]
    assert statement.endswith(f'FOR UPDATE OF "{ContainerInstance._meta.db_table}"'), statement
