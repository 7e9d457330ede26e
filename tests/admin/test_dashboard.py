"""The queue dashboard: its numbers follow the database; the page refreshes itself."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone

from containers import selectors
from containers.models import ContainerEvent, OrphanContainer
from containers.states import Status
from core.counters import counter_bump
from core.models import Counter
from outbox.models import OutboxEvent, OutboxStatus
from tests.factories import InstanceFactory, RuntimeFactory

pytestmark = pytest.mark.django_db
URL = "admin:containers_dashboard"


def _minute(minutes_ago: int) -> dt.datetime:
    return timezone.now().replace(second=0, microsecond=0) - dt.timedelta(minutes=minutes_ago)


def test_dashboard_shows_the_queue_against_its_limits(as_user, viewer, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 7, "create_queue_max_concurrency": 2})
    oldest = InstanceFactory(status=Status.PENDING)
    type(oldest).objects.filter(pk=oldest.pk).update(
        created_at=timezone.now() - dt.timedelta(seconds=90)
    )
    InstanceFactory(status=Status.PENDING)
    InstanceFactory(status=Status.CREATING)
    InstanceFactory(status=Status.RUNNING)
    OutboxEvent.objects.create(
        kind="ContainerCreateRequest",
        queue="create",
        aggregate_id="x",
        status=OutboxStatus.DEAD,
        available_at=timezone.now(),
    )
    OrphanContainer.objects.create(runtime=RuntimeFactory(), container_id="c", name="gb-x")
    response = as_user(viewer).get(reverse(URL))
    stats = response.context["stats"]
    assert (stats["pending_count"], stats["max_pending"]) == (2, 7)
    assert (stats["active_count"], stats["max_concurrency"]) == (1, 2)
    assert stats["dead_count"] == 1
    assert stats["orphan_count"] == 1
    assert 89 <= stats["oldest_pending_age_seconds"] < 200
    assert response.context["pending_pct"] == 29
    assert response.context["active_pct"] == 50
    content = response.content.decode()
    assert "of maxPending 7" in content and "of maxConcurrency 2" in content


def test_last_hour_counts_accepted_refused_and_failed(as_user, viewer):
    Counter.objects.create(minute=_minute(2), name="create_accepted", count=5)
    Counter.objects.create(minute=_minute(30), name="create_accepted", count=3)
    Counter.objects.create(minute=_minute(10), name="create_refused", count=2)
    Counter.objects.create(minute=_minute(0), name="instance_failed", count=1)
    Counter.objects.create(minute=_minute(90), name="create_accepted", count=100)  # too old
    Counter.objects.create(minute=_minute(1), name="sent", count=9)  # not charted
    response = as_user(viewer).get(reverse(URL))
    series = response.context["stats"]["series"]
    assert series["totals"] == {"create_accepted": 8, "create_refused": 2, "instance_failed": 1}
    assert len(series["buckets"]) == 12
    assert series["buckets"][-1]["create_accepted"] == 5
    assert series["buckets"][-1]["instance_failed"] == 1
    assert sum(b["create_accepted"] for b in series["buckets"]) == 8
    chart = response.context["chart"]
    assert len(chart["bars"]) == 36
    assert max(bar["height"] for bar in chart["bars"]) == chart["height"]
    assert "<svg" in response.content.decode()


def test_dashboard_numbers_follow_requests(as_user, operator, template, owner):
    client = as_user(operator)
    before = client.get(reverse(URL)).context["stats"]
    client.post(
        reverse("admin:containers_containerinstance_add"),
        {"template": template.pk, "owner": owner.pk},
    )
    after = client.get(reverse(URL)).context["stats"]
    assert after["pending_count"] == before["pending_count"] + 1
    assert (
        after["series"]["totals"]["create_accepted"]
        == before["series"]["totals"]["create_accepted"] + 1
    )


def test_latest_failures_list_their_reasons(as_user, viewer):
    for n, kind, from_status, to_status, message in [
        (1, "runtime", "running", "failed", "OOMKilled"),
        (
            2,
            "dead_letter",
            "stopped",
            "stopped",
            "ContainerStartRequest #4 dead: container missing",
        ),
        (3, "transition", "", "running", ""),
    ]:
        ContainerEvent.objects.create(
            instance_id=f"00000000-0000-0000-0000-00000000000{n}",
            instance_name=f"web-{n}",
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            message=message,
        )
    response = as_user(viewer).get(reverse(URL))
    failures = response.context["stats"]["failures"]
    assert [e.instance_name for e in failures] == ["web-2", "web-1"]
    content = response.content.decode()
    assert "OOMKilled" in content and "container missing" in content


def test_fragment_is_the_body_alone_for_the_refresh(as_user, viewer):
    client = as_user(viewer)
    page = client.get(reverse(URL)).content.decode()
    assert 'data-refresh="5"' in page and "fetch(" in page
    fragment = client.get(reverse(URL), {"fragment": "1"}).content.decode()
    assert 'id="gb-pending"' in fragment
    assert "<html" not in fragment


def test_counter_bump_feeds_the_series():
    counter_bump("create_refused", 3)
    assert selectors.request_series()["totals"]["create_refused"] == 3


def test_dead_letters_count_as_open_only_while_their_instance_exists(as_user, viewer):
    kept = InstanceFactory(status=Status.FAILED)
    for aggregate in (str(kept.id), str(uuid.uuid4()), str(uuid.uuid4())):  # two deleted
        OutboxEvent.objects.create(
            kind="ContainerStartRequest",
            queue="create",
            aggregate_id=aggregate,
            status=OutboxStatus.DEAD,
            available_at=timezone.now(),
        )
    response = as_user(viewer).get(reverse(URL))
    stats = response.context["stats"]
    assert (stats["dead_open_count"], stats["dead_count"]) == (1, 3)
    assert "3 dead in all" in response.content.decode()
