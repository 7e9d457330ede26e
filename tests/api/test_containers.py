"""/api/containers/: create, list, get, start, stop, delete, events and logs."""

from __future__ import annotations

import uuid

import pytest

from containers.models import ContainerEvent, ContainerInstance, Runtime
from outbox.models import OutboxEvent
from tests.api.helpers import assert_error, stream_get
from tests.containers.test_requests import ACCEPT, NOOP, STATES
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db


def _request(client, action, instance_id):
    url = f"/api/containers/{instance_id}/"
    if action == "delete":
        return client.delete(url)
    return client.post(f"{url}{action}/")


# --- create -------------------------------------------------------------------------------


def test_create_by_template_name_is_accepted_with_location(alice, template, owner):
    response = alice.post("/api/containers/", {"template": "sleeper"}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "pending"
    assert body["queued"] is True
    assert body["owner"] == "alice"
    assert body["template"] == {"id": template.pk, "name": "sleeper"}
    assert (body["runtime"], body["placement_reason"]) == (None, "")  # placed leaving pending
    assert response["Location"].endswith(f"/api/containers/{body['id']}/")
    instance = ContainerInstance.objects.get(pk=body["id"])
    assert instance.owner == owner
    row = OutboxEvent.objects.get()
    assert (row.kind, row.aggregate_id) == ("ContainerCreateRequest", body["id"])
    assert row.payload == {"by": "user:alice"}


def test_create_by_template_id_with_name_and_env(alice, template):
    template.user_env = ["MODE", "EMPTY"]
    template.save(update_fields=["user_env"])
    response = alice.post(
        "/api/containers/",
        {"template": template.pk, "name": "box", "env": {"MODE": "debug", "EMPTY": ""}},
        format="json",
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["name"] == "box"
    assert body["spec"]["env"]["MODE"] == "debug"
    assert body["spec"]["env"]["EMPTY"] == ""


def test_location_answers_the_created_instance(alice, template):
    created = alice.post("/api/containers/", {"template": "sleeper"}, format="json")
    fetched = alice.get(created["Location"])
    assert fetched.status_code == 200
    assert fetched.json()["id"] == created.json()["id"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "template"),
        ({"template": ""}, "template"),
        ({"template": True}, "template"),
        ({"template": ["sleeper"]}, "template"),
        ({"template": "no-such-template"}, "template"),
        ({"template": "99999999999999999999999"}, "template"),
        ({"template": "sleeper", "name": ""}, "name"),
        ({"template": "sleeper", "name": "x" * 129}, "name"),
        ({"template": "sleeper", "name": "a\x00b"}, "name"),
        ({"template": "sleeper", "env": ["A=1"]}, "env"),
        ({"template": "sleeper", "env": {"A": {"nested": 1}}}, "env"),
        ({"template": "sleeper", "env": {"A": "a\x00"}}, "env"),
    ],
)
def test_create_with_invalid_input_is_400_with_field(alice, template, body, field):
    response = alice.post("/api/containers/", body, format="json")
    error = assert_error(response, 400, "invalid")
    assert field in error["details"], error
    assert ContainerInstance.objects.count() == 0


def test_create_with_invalid_env_name_is_400_invalid_spec(alice, template):
    response = alice.post(
        "/api/containers/", {"template": "sleeper", "env": {"1BAD": "x"}}, format="json"
    )
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"]["field"] == "env"
    assert ContainerInstance.objects.count() == 0


def test_create_on_template_no_runtime_matches_is_400(alice, fake_runtime):
    TemplateFactory(name="gpu-job", constraints={"gpu": "yes"})
    response = alice.post("/api/containers/", {"template": "gpu-job"}, format="json")
    error = assert_error(response, 400, "no_matching_runtime")
    assert error["details"]["constraints"] == {"gpu": "yes"}


def test_create_with_volume_outside_roots_is_400_naming_the_volume_not_the_path(
    alice, staff, fake_runtime, caplog
):
    TemplateFactory(name="escape", volumes=[{"source": "/etc", "target": "/host"}])
    response = alice.post("/api/containers/", {"template": "escape"}, format="json")
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"] == {"field": "volumes[0]"}
    assert "/etc" not in response.content.decode()
    assert "/etc: outside the allowed volume roots" in caplog.text  # the operators' log
    # An operator (who may see the engines) is told the path.
    response = staff.post("/api/containers/", {"template": "escape"}, format="json")
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"]["path"] == "/etc" and "outside the allowed" in error["message"]
    assert ContainerInstance.objects.count() == 0


def test_create_when_queue_full_is_429_with_retry_after(alice, template, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 2})
    for _ in range(2):
        assert (
            alice.post("/api/containers/", {"template": "sleeper"}, format="json").status_code
            == 202
        )
    response = alice.post("/api/containers/", {"template": "sleeper"}, format="json")
    error = assert_error(response, 429, "queue_full")
    assert int(response["Retry-After"]) >= 1
    assert error["details"]["limit"] == 2
    assert ContainerInstance.objects.count() == 2
    assert OutboxEvent.objects.count() == 2


# --- list and get ---------------------------------------------------------------------------


def test_list_shows_own_instances_paginated(alice, make_instance, other_user):
    mine = [make_instance() for _ in range(3)]
    make_instance(owner=other_user)
    response = alice.get("/api/containers/?limit=2")
    assert response.status_code == 200
    body = response.json()
    assert "count" not in body  # pages never count the table (core.api.pagination)
    assert len(body["results"]) == 2
    assert body["next"] and body["previous"] is None
    second = alice.get(body["next"]).json()
    assert len(second["results"]) == 1 and second["next"] is None and second["previous"]
    ids = {row["id"] for row in body["results"] + second["results"]}
    assert ids == {str(instance.pk) for instance in mine}


def test_list_filters_by_status(alice, make_instance):
    running = make_instance("running")
    stopped = make_instance("stopped")
    make_instance("failed")
    body = alice.get("/api/containers/?status=running").json()
    assert [row["id"] for row in body["results"]] == [str(running.pk)]
    body = alice.get("/api/containers/?status=running&status=stopped").json()
    assert {row["id"] for row in body["results"]} == {str(running.pk), str(stopped.pk)}


def test_list_filters_by_template_id_or_name(alice, make_instance, owner, fake_runtime):
    ours = make_instance()
    other_template = TemplateFactory(name="other")
    from tests.factories import InstanceFactory

    InstanceFactory(owner=owner, template=other_template, runtime=fake_runtime)
    for ref in ("sleeper", str(ours.template_id)):
        body = alice.get(f"/api/containers/?template={ref}").json()
        assert [row["id"] for row in body["results"]] == [str(ours.pk)]


def test_staff_filters_by_owner(staff, make_instance, other_user):
    make_instance()
    theirs = make_instance(owner=other_user)
    for ref in ("mallory", str(other_user.pk)):
        body = staff.get(f"/api/containers/?owner={ref}").json()
        assert [row["id"] for row in body["results"]] == [str(theirs.pk)]


def test_list_orders_by_name_both_ways(alice, make_instance):
    for name in ("b", "c", "a"):
        make_instance(name=name)
    names = [row["name"] for row in alice.get("/api/containers/?ordering=name").json()["results"]]
    assert names == ["a", "b", "c"]
    names = [row["name"] for row in alice.get("/api/containers/?ordering=-name").json()["results"]]
    assert names == ["c", "b", "a"]


@pytest.mark.parametrize(
    "query, field",
    [
        ("status=bogus", "status"),
        ("ordering=owner__password", "ordering"),
        ("limit=-1", "limit"),
        ("limit=501", "limit"),
        ("offset=2", "offset"),
        ("cursor=abc", "cursor"),
        ("cursor=" + "A" * 1001, "cursor"),
    ],
)
def test_list_with_invalid_query_is_400(alice, make_instance, query, field):
    make_instance()
    error = assert_error(alice.get(f"/api/containers/?{query}"), 400, "invalid")
    assert field in error["details"]


def test_get_own_instance(alice, make_instance):
    instance = make_instance("running")
    body = alice.get(f"/api/containers/{instance.pk}/").json()
    assert body["id"] == str(instance.pk)
    assert body["status"] == "running"
    assert "queued" not in body


@pytest.mark.parametrize("ref", [uuid.uuid4(), "not-a-uuid", "1"])
def test_get_unknown_instance_is_404(alice, ref):
    assert_error(alice.get(f"/api/containers/{ref}/"), 404, "not_found")


# --- start, stop, delete in every state ------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("action", ["start", "stop", "delete"])
def test_request_in_every_state(alice, make_instance, action, state):
    instance = make_instance(state)
    response = _request(alice, action, instance.pk)
    stored = ContainerInstance.objects.get(pk=instance.pk)
    if state in ACCEPT[action]:
        assert response.status_code == 202, response.content
        assert response.json()["queued"] is True
        assert response.json()["status"] == stored.status == f"{action}_pending"
        assert OutboxEvent.objects.count() == 1
    elif state in NOOP[action]:
        assert response.status_code == 202, response.content
        assert response.json()["queued"] is False
        assert response.json()["status"] == stored.status == state
        assert OutboxEvent.objects.count() == 0
    else:
        error = assert_error(response, 409, "invalid_transition")
        assert error["details"] == {"status": state, "action": action}
        assert stored.status == state
        assert OutboxEvent.objects.count() == 0


@pytest.mark.parametrize("action", ["start", "stop", "delete"])
def test_request_for_unknown_instance_is_404(alice, action):
    assert_error(_request(alice, action, uuid.uuid4()), 404, "not_found")


def test_repeated_stop_is_accepted_once_queued_once(alice, make_instance):
    instance = make_instance("running")
    first = alice.post(f"/api/containers/{instance.pk}/stop/")
    second = alice.post(f"/api/containers/{instance.pk}/stop/")
    assert (first.status_code, second.status_code) == (202, 202)
    assert (first.json()["queued"], second.json()["queued"]) == (True, False)
    assert OutboxEvent.objects.count() == 1


# --- history and logs ---------------------------------------------------------------------


def test_events_list_history_newest_first(alice, template):
    created = alice.post("/api/containers/", {"template": "sleeper"}, format="json").json()
    ContainerInstance.objects.filter(pk=created["id"]).update(status="running")
    alice.post(f"/api/containers/{created['id']}/stop/")
    body = alice.get(f"/api/containers/{created['id']}/events/").json()
    kinds = [row["kind"] for row in body["results"]]
    assert kinds == ["ContainerStopRequest", "ContainerCreateRequest"]
    assert body["results"][0]["from_status"] == "running"
    assert body["results"][0]["to_status"] == "stop_pending"
    assert body["results"][0]["actor"] == "user:alice"


def test_events_say_their_kind_in_words_beside_the_kind_for_programs(alice, template):
    created = alice.post("/api/containers/", {"template": "sleeper"}, format="json").json()
    (row,) = alice.get(f"/api/containers/{created['id']}/events/").json()["results"]
    assert row["kind"] == "ContainerCreateRequest"
    assert row["kind_display"] == "create requested"


def test_events_of_unknown_instance_is_404(alice):
    assert_error(alice.get(f"/api/containers/{uuid.uuid4()}/events/"), 404, "not_found")


def test_logs_come_from_the_runtime(alice, make_instance, fake_runtime):
    from containers.engines import engine_for
    from containers.engines.base import ContainerSpec

    instance = make_instance("running")
    engine = engine_for(fake_runtime)
    engine.create(ContainerSpec(name=instance.container_name, image="busybox", labels={}))
    response = alice.get(f"/api/containers/{instance.pk}/logs/?tail=5")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": str(instance.pk), "tail": 5, "logs": "fake log line\n"}


def test_logs_follow_streams_until_the_container_stops(alice, make_instance, fake_runtime):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    from containers.engines import engine_for
    from containers.engines.base import ContainerSpec

    instance = make_instance("running")
    engine = engine_for(fake_runtime)
    ref = engine.create(ContainerSpec(name=instance.container_name, image="busybox", labels={}))
    engine.start(ref)
    headers = {"Authorization": alice._credentials["HTTP_AUTHORIZATION"]}

    async def follow():
        response = await AsyncClient().get(
            f"/api/containers/{instance.pk}/logs/?follow=1&seconds=30", headers=headers
        )
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; charset=utf-8" and response.streaming
        chunks = aiter(response.streaming_content)
        first = await anext(chunks)
        engine.stop(ref, 0)
        return first, [chunk async for chunk in chunks]

    first, rest = async_to_sync(follow)()
    assert first == b"fake log line\n"
    assert rest == []  # ends once the container stopped (the test would time out otherwise)


def test_logs_follow_ends_after_its_seconds(alice, make_instance, fake_runtime):
    from containers.engines import engine_for
    from containers.engines.base import ContainerSpec

    instance = make_instance("running")
    engine = engine_for(fake_runtime)
    engine.start(engine.create(ContainerSpec(name=instance.container_name, image="b", labels={})))
    response, body = stream_get(alice, f"/api/containers/{instance.pk}/logs/?follow=true&seconds=1")
    assert response.status_code == 200
    assert body == b"fake log line\n"  # the container runs on: only the bound ended it


def test_logs_follow_says_when_the_streams_own_time_limit_ends_it(
    alice, make_instance, fake_runtime, gobrave_config
):
    from containers.engines import engine_for
    from containers.engines.base import ContainerSpec

    gobrave_config(streams={"max_seconds": 1})
    instance = make_instance("running")
    engine = engine_for(fake_runtime)
    engine.start(engine.create(ContainerSpec(name=instance.container_name, image="b", labels={})))
    response, body = stream_get(alice, f"/api/containers/{instance.pk}/logs/?follow=1")
    assert response.status_code == 200
    assert body == (
        b"fake log line\n\n[gobrave: stream ended: the stream reached its time limit (1 s); "
        b"open it again]\n"
    ), body


@pytest.mark.parametrize("seconds", ["0", "86401", "x"])
def test_logs_follow_with_invalid_seconds_is_400(alice, make_instance, seconds):
    instance = make_instance("running")
    response = alice.get(f"/api/containers/{instance.pk}/logs/?follow=1&seconds={seconds}")
    assert "seconds" in assert_error(response, 400)["details"]


def test_logs_of_a_container_not_yet_created_are_empty(alice, make_instance):
    instance = make_instance("pending")
    body = alice.get(f"/api/containers/{instance.pk}/logs/").json()
    assert body == {"id": str(instance.pk), "tail": 100, "logs": ""}


@pytest.mark.parametrize("tail", ["0", "-3", "abc", "10001"])
def test_logs_with_invalid_tail_is_400(alice, make_instance, tail):
    instance = make_instance("running")
    error = assert_error(alice.get(f"/api/containers/{instance.pk}/logs/?tail={tail}"), 400)
    assert "tail" in error["details"]


def test_logs_when_runtime_is_unreachable_is_503(alice, owner, template):
    from tests.factories import InstanceFactory

    down = Runtime.objects.create(
        name="down", driver="docker", base_url="tcp://127.0.0.1:1", labels={"engine": "down"}
    )
    instance = InstanceFactory(owner=owner, template=template, runtime=down)
    ContainerInstance.objects.filter(pk=instance.pk).update(status="running")
    error = assert_error(
        alice.get(f"/api/containers/{instance.pk}/logs/"), 503, "runtime_unavailable"
    )
    assert error["details"] == {"runtime": "down"}


def test_following_the_logs_of_an_unreachable_runtime_is_503_before_any_output(
    alice, owner, template
):
    """The async follow opens the engine's stream before the response starts: an engine
    that does not answer is a 503, not a 200 with an empty or broken body."""
    from tests.factories import InstanceFactory

    down = Runtime.objects.create(
        name="down", driver="docker", base_url="tcp://127.0.0.1:1", labels={"engine": "down"}
    )
    instance = InstanceFactory(owner=owner, template=template, runtime=down)
    ContainerInstance.objects.filter(pk=instance.pk).update(status="running")
    response = alice.get(f"/api/containers/{instance.pk}/logs/?follow=1&seconds=5")
    error = assert_error(response, 503, "runtime_unavailable")
    assert error["details"] == {"runtime": "down"}


def test_logs_when_runtime_raises_runtime_failure_is_503(alice, make_instance, monkeypatch):
    from containers.engines.base import EngineError
    from containers.engines.fake import FakeEngine

    def broken(self, ref, tail=100):
        raise EngineError("engine is restarting")

    monkeypatch.setattr(FakeEngine, "logs", broken)
    instance = make_instance("running")
    error = assert_error(
        alice.get(f"/api/containers/{instance.pk}/logs/"), 503, "runtime_unavailable"
    )
    assert "engine is restarting" in error["message"]


def test_history_entries_are_not_counted_as_instances(alice, template):
    alice.post("/api/containers/", {"template": "sleeper"}, format="json")
    assert ContainerEvent.objects.count() == 1
    assert len(alice.get("/api/containers/").json()["results"]) == 1


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"APP_X": "1", "LD_PRELOAD": "/work/evil.so"}, "LD_PRELOAD"),
        ({"BASH_ENV": "/work/evil.sh"}, "BASH_ENV"),
        ({"PATH": "/work/bin"}, "PATH"),
        ({"MODE": "debug", "UNDECLARED": "1"}, "UNDECLARED"),
        ({"PORT": "1"}, "PORT"),  # the template's own key, not opened to users
    ],
)
def test_a_refused_env_key_is_400_naming_it_and_creates_nothing(alice, template, env, key):
    template.env = {"PORT": "8080"}
    template.user_env = ["APP_*", "MODE"]
    template.save(update_fields=["env", "user_env"])
    response = alice.post("/api/containers/", {"template": "sleeper", "env": env}, format="json")
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"] == {"field": "env", "key": key}, error
    assert key in error["message"]
    assert (ContainerInstance.objects.count(), OutboxEvent.objects.count()) == (0, 0)


def test_an_env_value_over_the_bound_is_400_naming_env(alice, template):
    template.user_env = ["NOTE"]
    template.save(update_fields=["user_env"])
    response = alice.post(
        "/api/containers/", {"template": "sleeper", "env": {"NOTE": "x" * 5000}}, format="json"
    )
    error = assert_error(response, 400, "invalid")
    assert "env" in error["details"], error
    assert ContainerInstance.objects.count() == 0
