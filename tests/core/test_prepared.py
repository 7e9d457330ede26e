"""``core.prepared``: querysets compiled once and run as prepared statements, each read
back as the ORM reads it, each call with its own values."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from containers.models import ContainerInstance, Runtime
from core import prepared
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RuntimeFactory

pytestmark = pytest.mark.django_db


def _with_runtime(*, id: uuid.UUID):
    return ContainerInstance.objects.select_related("runtime").filter(id=id).order_by()


def test_first_reads_a_row_and_its_select_related_row_as_the_orm_does(postgres):
    made = [InstanceFactory(spec={"n": n}) for n in range(2)]
    for instance in (*made, made[0]):  # compiled once: each call's id is its own
        orm = _with_runtime(id=instance.pk).get()
        with CaptureQueriesContext(connection) as seen:
            read = prepared.first(("test.with_runtime",), _with_runtime, id=instance.pk)
            runtime = read.runtime
        assert len(seen.captured_queries) == 1
        fields = [f.attname for f in ContainerInstance._meta.concrete_fields]
        assert {f: getattr(read, f) for f in fields} == {f: getattr(orm, f) for f in fields}
        assert read.spec == orm.spec and not read._state.adding
        assert (runtime.pk, runtime.labels) == (orm.runtime.pk, orm.runtime.labels)
    assert prepared.first(("test.with_runtime",), _with_runtime, id=uuid.uuid4()) is None


@pytest.mark.django_db(transaction=True)
def test_a_compiled_lock_is_refused_outside_a_transaction_as_the_orm_refuses_it(postgres):
    instance = InstanceFactory()

    def locked(*, id):
        return ContainerInstance.objects.select_for_update().filter(id=id)

    with transaction.atomic():
        assert prepared.first(("test.locked",), locked, id=instance.pk).pk == instance.pk
    with pytest.raises(TransactionManagementError):  # compiled already: refused all the same
        prepared.first(("test.locked",), locked, id=instance.pk)


def test_objects_lists_the_rows_in_the_queryset_s_order(postgres):
    RuntimeFactory(name="b-runtime", driver="fake")
    RuntimeFactory(name="a-runtime", driver="fake")
    RuntimeFactory(name="c-off", driver="fake", enabled=False)
    RuntimeFactory(name="d-docker", driver="docker")

    def enabled(*, driver: str):
        return Runtime.objects.filter(enabled=True, driver=driver).order_by("name")

    for driver in ("docker", "fake", "docker"):
        read = prepared.objects(("test.enabled",), enabled, driver=driver)
        assert [r.pk for r in read] == [r.pk for r in enabled(driver=driver)], driver
    assert [r.name for r in read if r.name.endswith("-docker")] == ["d-docker"]
    read = prepared.objects(("test.enabled",), enabled, driver="fake")
    assert [r.name for r in read if r.name.endswith("-runtime")] == ["a-runtime", "b-runtime"]
    assert all(isinstance(r, Runtime) and isinstance(r.labels, dict) for r in read)


def test_rows_are_tuples_converted_as_values_list_converts_them(postgres):
    first, second = InstanceFactory(spec={"k": [1]}), InstanceFactory(spec={"k": [2]})

    def specs(*, status: str):
        return ContainerInstance.objects.filter(status=status).order_by("created_at")

    build = lambda status: specs(status=status).values_list("id", "spec")  # noqa: E731
    found = prepared.rows(("test.specs",), build, status="pending")
    assert found == list(build("pending")) and [row[0] for row in found] == [first.pk, second.pk]
    assert [row[1]["k"] for row in found] == [[1], [2]]  # JSON read back as the ORM reads it
    assert prepared.rows(("test.specs",), build, status="running") == []


def test_update_rows_updates_the_rows_of_this_call_s_values_only(postgres):
    def woken(*, queue: str, pause: dt.timedelta):
        rows = OutboxEvent.objects.filter(queue=queue, status="pending")
        return rows, {"available_at": Now() + pause, "last_error": queue}

    common = {"kind": "TestProbe", "available_at": Now()}
    mine = OutboxEvent.objects.create(queue="mine", **common)
    other = OutboxEvent.objects.create(queue="other", **common)
    pause = dt.timedelta(hours=1)
    for _ in range(2):  # compiled once
        assert prepared.update_rows(("test.woken",), woken, queue="mine", pause=pause) == 1
    mine.refresh_from_db()
    other.refresh_from_db()
    assert mine.last_error == "mine" and other.last_error == ""
    assert mine.available_at > other.available_at + dt.timedelta(minutes=59)
    assert prepared.update_rows(("test.woken",), woken, queue="none", pause=pause) == 0


def test_with_the_layer_off_the_orm_runs_and_nothing_is_prepared(postgres, monkeypatch):
    instance = InstanceFactory()
    assert prepared.active()
    monkeypatch.setattr(prepared.layer, "enabled", False)
    assert not prepared.active()
    with CaptureQueriesContext(connection) as seen:
        read = prepared.first(("test.off",), _with_runtime, id=instance.pk)
    assert read.pk == instance.pk and read.runtime.pk == instance.runtime_id
    assert "test.off" not in prepared.querysets._compiled
    assert '"containers_runtime"' in seen.captured_queries[0]["sql"]
    assert prepared.execute("SELECT 1").fetchone() == (1,)  # Django's own cursor


def _pushed(*, queue: str, pause: dt.timedelta):
    rows = OutboxEvent.objects.filter(queue=queue, status="pending")
    return rows, {"available_at": Now() + pause, "last_error": queue}


def test_update_returning_is_one_statement_and_reads_the_row_as_updated(postgres):
    made = OutboxEvent.objects.create(queue="mine", kind="TestProbe", available_at=Now())
    pause = dt.timedelta(hours=1)
    for _ in range(2):  # compiled once
        with CaptureQueriesContext(connection) as seen:
            row = prepared.update_returning(("test.pushed",), _pushed, queue="mine", pause=pause)
        assert len(seen.captured_queries) == 1, seen.captured_queries
        stored = OutboxEvent.objects.get(pk=made.pk)
        assert (row.pk, row.last_error, row.available_at) == (
            stored.pk, "mine", stored.available_at,
        )  # fmt: skip
        assert not row._state.adding
    assert prepared.update_returning(("test.pushed",), _pushed, queue="none", pause=pause) is None


def test_update_returning_with_the_layer_off_updates_and_reads_through_the_orm(
    postgres, monkeypatch
):
    made = OutboxEvent.objects.create(queue="mine", kind="TestProbe", available_at=Now())
    monkeypatch.setattr(prepared.layer, "enabled", False)
    pause = dt.timedelta(hours=1)
    row = prepared.update_returning(("test.pushed.off",), _pushed, queue="mine", pause=pause)
    assert (row.pk, row.last_error) == (made.pk, "mine")
    assert prepared.update_returning(("test.pushed.off",), _pushed, queue="x", pause=pause) is None


def test_update_rows_with_notify_sends_it_in_the_same_statement(postgres):
    OutboxEvent.objects.create(queue="mine", kind="TestProbe", available_at=Now())
    pause = dt.timedelta(seconds=1)
    with CaptureQueriesContext(connection) as seen:
        count = prepared.update_rows(
            ("test.woken.notify",), _pushed, queue="mine", pause=pause, notify=("gb_test", "q")
        )
    assert count == 1
    assert len(seen.captured_queries) == 1, seen.captured_queries
    assert "pg_notify" in seen.captured_queries[0]["sql"], seen.captured_queries
