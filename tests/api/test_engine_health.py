"""An instance in the API shows its engine's health as last recorded, and since when."""

from __future__ import annotations

import pytest

from containers.execution.health import runtime_health_record
from containers.models import Runtime

pytestmark = pytest.mark.django_db


def test_an_instance_shows_its_engine_unreachable_since_when(alice, make_instance, fake_runtime):
    instance = make_instance("running")
    body = alice.get(f"/api/containers/{instance.pk}/").json()
    assert body["runtime"]["health"] == "unknown", body
    assert body["runtime"]["health_since"] is None, body
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="cut")
    since = Runtime.objects.get(pk=fake_runtime.pk).health_since
    body = alice.get(f"/api/containers/{instance.pk}/").json()
    assert body["status"] == "running", body  # the instance keeps its state
    assert body["runtime"]["health"] == "unreachable", body
    assert body["runtime"]["health_since"].startswith(since.isoformat()[:19]), (body, since)
    listed = alice.get("/api/containers/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [row["runtime"]["health"] for row in rows] == ["unreachable"], listed


def test_an_instance_on_an_unreachable_engine_says_so_in_its_reason(
    alice, make_instance, fake_runtime
):
    instance = make_instance("running")
    runtime_health_record(runtime_id=fake_runtime.pk, reachable=False, error="no route to host")
    body = alice.get(f"/api/containers/{instance.pk}/").json()
    assert body["status"] == "running", body
    assert body["status_reason"].startswith("engine unreachable since "), body
    assert body["status_reason"].endswith(f"(runtime {fake_runtime.name}: no route to host)")
