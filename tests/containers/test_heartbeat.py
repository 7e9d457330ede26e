"""The engines' heartbeat (containers.execution.heartbeat): one round pings every enabled
engine and records what it found; an engine that answers again is reported. Fake engines
on the real database (the real link cut is in test_engine_cut.py)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db.models.functions import Now

from containers.engines import engine_for
from containers.execution.heartbeat import Heartbeat
from containers.models import ContainerInstance, Runtime
from containers.requests.services import container_create_by_template
from tests.factories import RuntimeFactory
from tests.processes import relay_drain

pytestmark = pytest.mark.django_db


def health(runtime) -> tuple[str, str]:
    row = Runtime.objects.get(pk=runtime.pk)
    return row.health, row.last_error


@pytest.fixture
def engines(tmp_path):
    up = RuntimeFactory(name="up", base_url=f"fake://{tmp_path / 'up'}")
    away = RuntimeFactory(name="away", base_url=f"fake://{tmp_path / 'away'}")
    (engine_for(away).root / "down").write_text("")
    return up, away


def test_a_round_records_every_enabled_engine(engines):
    up, away = engines
    off = RuntimeFactory(name="off", base_url="fake:///nonexistent/off", enabled=False)
    beat = Heartbeat(stopping=threading.Event(), interval=1, timeout=1)
    answers = beat.beat()
    assert answers[("fake", up.base_url)] == "", answers
    assert "did not answer" in answers[("fake", away.base_url)], answers
    assert health(up) == ("reachable", "")
    assert health(away)[0] == "unknown", health(away)  # one ping missed: not yet
    beat.beat()
    assert health(away)[0] == "unreachable" and "is down" in health(away)[1], health(away)
    assert health(off)[0] == "unknown"  # a disabled runtime is not pinged


def test_rows_sharing_one_daemon_share_its_ping(engines):
    up, _ = engines
    twin = RuntimeFactory(name="twin", base_url=up.base_url)
    answers = Heartbeat(stopping=threading.Event(), interval=1, timeout=1).beat()
    assert list(answers).count(("fake", up.base_url)) == 1, answers  # one ping for both
    assert health(twin) == ("reachable", "")


def test_an_engine_that_answers_again_is_reported_once(engines):
    up, away = engines
    returned = []
    beat = Heartbeat(stopping=threading.Event(), on_return=returned.append, interval=1, timeout=1)
    beat.beat()
    beat.beat()
    assert returned == [] and health(away)[0] == "unreachable", health(away)
    (engine_for(away).root / "down").unlink()
    beat.beat()
    assert [runtime.name for runtime in returned] == ["away"]
    assert health(away) == ("reachable", "")
    beat.beat()
    assert len(returned) == 1  # reachable since: nothing new to report


def test_instances_on_an_engine_the_heartbeat_finds_away_say_why(engines, template, owner):
    up, away = engines
    (engine_for(away).root / "down").unlink()
    instance = container_create_by_template(template=template, owner=owner, actor="t", runtime=away)
    assert relay_drain() == ["sent"]
    (engine_for(away).root / "down").write_text("")
    beat = Heartbeat(stopping=threading.Event(), interval=1, timeout=1)
    beat.beat()
    assert ContainerInstance.objects.get(pk=instance.pk).status_reason == ""  # one miss
    beat.beat()
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.status == "running", (row.status, row.status_reason)
    assert row.status_reason.startswith("engine unreachable since "), row.status_reason


def test_past_engine_lost_after_the_heartbeat_gives_up_on_an_engine_that_does_not_answer(
    engines, template, owner, gobrave_config
):
    gobrave_config(container={"engine_lost_after": 60.0})
    up, away = engines
    (engine_for(away).root / "down").unlink()
    instance = container_create_by_template(template=template, owner=owner, actor="t", runtime=away)
    assert relay_drain() == ["sent"]
    (engine_for(away).root / "down").write_text("")
    beat = Heartbeat(stopping=threading.Event(), interval=1, timeout=1)
    beat.beat()
    beat.beat()
    assert ContainerInstance.objects.get(pk=instance.pk).status == "running"
    Runtime.objects.filter(pk=away.pk).update(health_since=Now() - dt.timedelta(seconds=61))
    beat.beat()
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_missing) == ("failed", True), row.status_reason
    assert row.status_reason.startswith("engine lost: runtime away"), row.status_reason
