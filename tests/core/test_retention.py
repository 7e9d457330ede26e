"""Retention (``core.retention``): each purge deletes only what is past its age, in
batches of ``retention.batch_size`` rows (one statement each), and the keys are
validated in config.yml."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from containers.execution.housekeeping import history_purge
from containers.models import ContainerEvent, RuntimeEvent
from core.config import ConfigError, load_config
from core.retention import registered, retention_run
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db

DAY = dt.timedelta(days=1)


def _row(status: str, kind: str = "ContainerCreateRequest", **fields) -> OutboxEvent:
    return OutboxEvent.objects.create(
        kind=kind,
        queue="create",
        aggregate_id="a",
        status=status,
        available_at=timezone.now(),
        **fields,
    )


def _deletes(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"].startswith("DELETE")]


def test_every_purge_is_registered():
    assert registered() == [
        "containers.deleted_instance_history",
        "containers.engine_history",
        "outbox.dead_letters_resolved",
        "outbox.sent",
        "webhooks.deliveries",
    ]


def test_sent_rows_past_retention_go_in_batches(gobrave_config):
    gobrave_config(outbox={"retention": 7 * 86400.0})
    old = [_row("sent", sent_at=timezone.now() - 8 * DAY) for _ in range(5)]
    fresh = _row("sent", sent_at=timezone.now() - DAY)
    pending = _row("pending")
    with CaptureQueriesContext(connection) as captured:
        done = retention_run(batch=2)
    assert done["outbox.sent"] == 5
    assert len(_deletes(captured)) == 3  # 2 + 2 + 1 rows, a statement each
    left = set(OutboxEvent.objects.values_list("id", flat=True))
    assert left == {fresh.id, pending.id} and not left & {r.id for r in old}


def test_dead_letters_go_only_once_dismissed_and_old_enough(gobrave_config):
    gobrave_config(retention={"dead_letters_resolved": 30 * 86400.0})
    undismissed = _row("dead")
    OutboxEvent.objects.filter(pk=undismissed.pk).update(created_at=timezone.now() - 90 * DAY)
    recent = _row("dead", resolved_at=timezone.now() - DAY, resolved_by="op")
    _row("dead", resolved_at=timezone.now() - 31 * DAY, resolved_by="op")
    assert retention_run()["outbox.dead_letters_resolved"] == 1
    assert set(OutboxEvent.objects.values_list("id", flat=True)) == {undismissed.id, recent.id}
    gobrave_config(retention={"dead_letters_resolved": None})  # empty: kept forever
    OutboxEvent.objects.filter(pk=recent.pk).update(resolved_at=timezone.now() - 400 * DAY)
    assert retention_run()["outbox.dead_letters_resolved"] == 0


def test_deleted_instances_history_is_kept_by_default_and_purged_when_configured(
    gobrave_config,
):
    live = InstanceFactory()
    gone = uuid.uuid4()
    old = timezone.now() - 100 * DAY
    kept_live = ContainerEvent.objects.create(instance_id=live.id, kind="t", created_at=old)
    of_gone = [
        ContainerEvent.objects.create(instance_id=gone, kind="t", created_at=old) for _ in range(3)
    ]
    recent_gone = ContainerEvent.objects.create(instance_id=gone, kind="t")
    assert retention_run()["containers.deleted_instance_history"] == 0  # default: keep
    assert ContainerEvent.objects.count() == 5
    gobrave_config(retention={"deleted_instance_history": 90 * 86400.0})
    with CaptureQueriesContext(connection) as captured:
        assert retention_run(batch=2)["containers.deleted_instance_history"] == 3
    assert len([d for d in _deletes(captured) if "containerevent" in d]) == 2
    left = set(ContainerEvent.objects.values_list("id", flat=True))
    assert left == {kept_live.id, recent_gone.id}
    assert not left & {e.id for e in of_gone}
    ContainerEvent.objects.filter(pk=recent_gone.pk).update(created_at=timezone.now() - 2 * DAY)
    assert history_purge(10, older_than=DAY) == 1  # an age given by the caller


def test_engines_history_is_kept_by_default_and_purged_when_configured(gobrave_config):
    old = [
        RuntimeEvent.objects.create(
            runtime_id=1, runtime_name="a", kind="engine.cordoned", created_at=timezone.now() - age
        )
        for age in (100 * DAY, 95 * DAY, DAY)
    ]
    assert retention_run()["containers.engine_history"] == 0  # default: keep
    gobrave_config(retention={"engine_history": 90 * 86400.0})
    assert retention_run(batch=1)["containers.engine_history"] == 2
    assert list(RuntimeEvent.objects.values_list("id", flat=True)) == [old[2].id]


def test_a_failing_purge_does_not_stop_the_others(gobrave_config, monkeypatch, caplog):
    from core import retention

    def broken(batch: int) -> int:
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(retention._purges, "a.broken", broken)
    _row("sent", sent_at=timezone.now() - 30 * DAY)
    done = retention_run()
    assert "a.broken" not in done and done["outbox.sent"] == 1
    assert "purge a.broken failed" in caplog.text


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("dead_letters_resolved", "soon", "retention.dead_letters_resolved"),
        ("deleted_instance_history", "5s", "retention.deleted_instance_history"),
        ("batch_size", "0", "retention.batch_size"),
        ("interval", "-1", "retention.interval"),
    ],
)
def test_bad_retention_values_are_refused_naming_the_key(tmp_path, key, value, words):
    with pytest.raises(ConfigError, match=words):
        load_config(tmp_path / "none.yml", environ={f"GOBRAVE_RETENTION_{key.upper()}": value})


def test_the_shipped_config_keeps_deleted_instances_history():
    config = load_config("config.yml", environ={})
    assert config["retention"]["deleted_instance_history"] is None
    assert config["retention"]["engine_history"] is None
    assert config["retention"]["dead_letters_resolved"] == 30 * 86400.0


def test_the_command_runs_every_purge_and_says_what_went():
    import io

    from django.core.management import call_command

    _row("sent", sent_at=timezone.now() - 30 * DAY)
    out = io.StringIO()
    call_command("retention_purge", "--batch", "5", stdout=out)
    assert "outbox.sent: 1 deleted" in out.getvalue().splitlines()


def test_finished_webhook_deliveries_go_past_their_age_and_nothing_else(gobrave_config):
    from webhooks.kinds import DELIVERY_KIND

    gobrave_config(retention={"webhook_deliveries": 30 * 86400.0})
    old = [_row(status, kind=DELIVERY_KIND) for status in ("sent", "dead", "pending")]
    other = _row("dead")  # another kind's dead letter, as old: the outbox's rules keep it
    OutboxEvent.objects.update(created_at=timezone.now() - 31 * DAY)
    recent = _row("dead", kind=DELIVERY_KIND)
    assert retention_run()["webhooks.deliveries"] == 2
    left = set(OutboxEvent.objects.values_list("id", flat=True))
    assert left == {old[2].id, other.id, recent.id}, left  # the waiting one stays
    gobrave_config(retention={"webhook_deliveries": None})  # empty: kept
    OutboxEvent.objects.filter(pk=recent.pk).update(created_at=timezone.now() - 400 * DAY)
    assert retention_run()["webhooks.deliveries"] == 0
