"""The console's live pages as streams of server-sent events: the instance page
(``<id>/stream/``) and the queue dashboard (``dashboard/stream/``).

Read through Django's ASGI client with a one-second idle bound, so each stream ends by
itself once nothing changes and is read to its end. (The browser test follows a real
page; tests/containers/test_web_streams.py the real server.)
"""

from __future__ import annotations

import json

import pytest

from tests.api.helpers import stream_get
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db


def _events(body: bytes) -> list[tuple[str, object]]:
    events = []
    for block in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.fixture(autouse=True)
def quiet_streams_end(gobrave_config):
    gobrave_config(streams={"idle_seconds": 1, "per_user": 1000, "total": 10_000})


@pytest.mark.django_db(transaction=True)  # the stream reads in threads of its own
def test_the_instance_page_stream_sends_its_state_then_ends_when_quiet(
    as_user, viewer, fake_runtime
):
    instance = InstanceFactory(status="stopped", runtime=fake_runtime, status_reason="by hand")
    response, body = stream_get(
        as_user(viewer), f"/admin/containers/containerinstance/{instance.pk}/stream/"
    )
    assert response.status_code == 200, body
    assert response["Content-Type"] == "text/event-stream"
    events = _events(body)
    assert events[0][0] == "state", events
    assert (
        events[0][1]["status"] == "stopped" and events[0][1]["fields"]["status_reason"] == "by hand"
    )
    assert "tbody" in events[0][1]["events_html"] or "history" in events[0][1]["events_html"]
    assert events[-1] == ("end", {"reason": "nothing new for 1 s; open the stream again"}), events


def test_the_dashboard_stream_sends_its_body(as_user, viewer):
    response, body = stream_get(
        as_user(viewer), "/admin/containers/containerinstance/dashboard/stream/"
    )
    assert response.status_code == 200, body
    events = _events(body)
    assert events[0][0] == "body" and 'id="gb-pending"' in events[0][1]["html"], events[:1]
    assert events[-1][0] == "end", events


@pytest.mark.parametrize("path", ["dashboard/stream/", "{pk}/stream/"])
def test_the_console_streams_are_for_staff_who_may_see_instances(
    as_user, outsider, fake_runtime, path
):
    instance = InstanceFactory(runtime=fake_runtime)
    url = "/admin/containers/containerinstance/" + path.format(pk=instance.pk)
    response = as_user(outsider).get(url)
    assert response.status_code == 302 and "/login/" in response["Location"], response


def test_an_instance_page_stream_of_an_unknown_instance_is_404(as_user, viewer):
    response = as_user(viewer).get(
        "/admin/containers/containerinstance/00000000-0000-0000-0000-000000000000/stream/"
    )
    assert response.status_code == 404


@pytest.mark.django_db(transaction=True)  # the stream reads in threads of its own
def test_the_instance_page_stream_passes_its_checks_while_its_viewer_may_watch(
    as_user, viewer, fake_runtime, gobrave_config
):
    """A check every second (a third of a 3 s lease) before the 2 s idle bound ends it:
    the page's access rule answers (the viewer may still watch), the stream goes on."""
    gobrave_config(streams={"idle_seconds": 2, "lease_seconds": 3, "per_user": 1000})
    instance = InstanceFactory(status="stopped", runtime=fake_runtime)
    response, body = stream_get(
        as_user(viewer), f"/admin/containers/containerinstance/{instance.pk}/stream/"
    )
    events = _events(body)
    assert events[-1] == ("end", {"reason": "nothing new for 2 s; open the stream again"}), events
