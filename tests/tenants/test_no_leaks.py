"""Nothing leaks to users: secret env values, host paths and engine addresses stay out of
their responses and error texts (contract §8); an error still names the field that was wrong.
Operators, who are trusted, still see everything."""

from __future__ import annotations

import pytest
from django.conf import settings

from containers.models import ContainerInstance, ContainerTemplate
from containers.requests.lifecycle import record
from containers.spec.redaction import error_for, scrub
from tests.factories import TemplateFactory
from tests.placing import place

pytestmark = pytest.mark.django_db

SECRET = "hunter2-do-not-show"


@pytest.fixture
def secret_template(fake_runtime):
    return TemplateFactory(
        name="vault",
        env={"TOKEN": SECRET, "MODE": "debug", "DATA": "$WORKSPACE_PATH"},
        secret_env=["TOKEN"],
        volumes=[{"source": "$WORKSPACE_PATH", "target": "/work", "read_only": False}],
    )


def _workspace_root() -> str:
    return settings.GOBRAVE["container"]["workspace_root"]


def _assert_clean(response) -> None:
    text = response.content.decode()
    assert SECRET not in text, text
    assert _workspace_root() not in text, text
    assert "unix://" not in text and "fake://" not in text, text


def test_a_user_sees_a_template_without_its_secrets_or_host_paths(callers, secret_template):
    response = callers["user"].api.get(f"/api/templates/{secret_template.pk}/")
    assert response.status_code == 200
    _assert_clean(response)
    body = response.json()
    assert body["env"]["TOKEN"] == "********" and body["env"]["MODE"] == "debug"
    assert body["volumes"] == [{"target": "/work", "read_only": False}]


def test_an_operator_sees_the_template_as_written(callers, secret_template):
    body = callers["operator"].api.get(f"/api/templates/{secret_template.pk}/").json()
    assert body["env"]["TOKEN"] == SECRET
    assert body["volumes"][0]["source"] == "$WORKSPACE_PATH"


def test_a_viewer_sees_host_paths_but_not_secret_values(callers, secret_template):
    body = callers["viewer"].api.get(f"/api/templates/{secret_template.pk}/").json()
    assert body["env"]["TOKEN"] == "********"
    assert body["volumes"][0]["source"] == "$WORKSPACE_PATH"


def test_a_users_own_instance_shows_no_secret_or_host_path(callers, secret_template):
    alice = callers["user"].api
    created = alice.post("/api/containers/", {"template": "vault"}, format="json")
    assert created.status_code == 202, created.content
    _assert_clean(created)
    instance = place(ContainerInstance.objects.get())  # its workspace resolved for its engine
    assert instance.spec["env"]["TOKEN"] == SECRET  # the worker still gets it
    for path in (f"/api/containers/{instance.pk}/", "/api/containers/"):
        response = alice.get(path)
        assert response.status_code == 200
        _assert_clean(response)
    spec = alice.get(f"/api/containers/{instance.pk}/").json()["spec"]
    assert spec["env"]["TOKEN"] == "********"
    assert spec["mounts"] == [{"target": "/work", "read_only": False}]
    operator = callers["operator"].api.get(f"/api/containers/{instance.pk}/").json()["spec"]
    assert operator["env"]["TOKEN"] == SECRET
    # The owner's workspace, as gobrave made it on the engine (a named volume by default).
    assert operator["mounts"][0]["source"] == instance.spec["workspace"]["source"]


def test_history_and_reasons_lose_engine_addresses_and_host_paths(callers, secret_template):
    alice = callers["user"].api
    alice.post("/api/containers/", {"template": "vault"}, format="json")
    instance = ContainerInstance.objects.get()
    socket = "unix:///var/run/docker.sock"
    reason = f"Cannot connect to the Docker daemon at {socket} ({_workspace_root()}/7)"
    ContainerInstance.objects.filter(pk=instance.pk).update(status="failed", status_reason=reason)
    record(instance, kind="note", actor="worker", message=reason, data={"error": reason})
    for path in (f"/api/containers/{instance.pk}/", f"/api/containers/{instance.pk}/events/"):
        response = alice.get(path)
        assert response.status_code == 200
        _assert_clean(response)
        assert "/var/run/docker.sock" not in response.content.decode()
    shown = alice.get(f"/api/containers/{instance.pk}/").json()["status_reason"]
    assert shown.startswith("Cannot connect to the Docker daemon at <engine>")
    full = callers["operator"].api.get(f"/api/containers/{instance.pk}/").json()
    assert full["status_reason"] == reason


def test_a_refused_volume_tells_a_user_which_volume_and_nothing_more(callers):
    user = callers["user"].user
    message, details = error_for(
        user,
        "volumes[1].source: /srv/private/x is outside the allowed volume roots",
        {"path": "/srv/private/x", "allowed": ["/srv/ok"]},
    )
    assert details == {"field": "volumes[1]"}
    assert "/srv" not in message and message.startswith("volumes[1]:")


def test_any_other_error_keeps_its_field_and_loses_host_details(callers):
    message, details = error_for(
        callers["user"].user,
        "env.DATA: the runtime at tcp://10.1.2.3:2376 refused it",
        {"field": "env", "key": "DATA"},
    )
    assert details == {"field": "env", "key": "DATA"}
    assert "10.1.2.3" not in message and message.startswith("env.DATA:")


def test_scrub_leaves_paths_inside_the_container_alone():
    assert scrub('exec: "/bin/foo": not found') == 'exec: "/bin/foo": not found'
    assert "<host path>" in scrub("/var/lib/docker/overlay2/abc/merged: no such file")


def test_in_the_admin_a_viewer_sees_neither_secret_values_nor_an_instances_secret(
    callers, secret_template
):
    from django.urls import reverse

    callers["user"].api.post("/api/containers/", {"template": "vault"}, format="json")
    instance = ContainerInstance.objects.get()
    pages = [
        reverse("admin:containers_containertemplate_change", args=[secret_template.pk]),
        reverse("admin:containers_containerinstance_change", args=[instance.pk]),
    ]
    for url in pages:
        viewer = callers["viewer"].web.get(url)
        assert viewer.status_code == 200
        assert SECRET not in viewer.content.decode(), url
        assert "********" in viewer.content.decode(), url
        operator = callers["operator"].web.get(url)
        assert operator.status_code == 200
        assert SECRET in operator.content.decode(), url


def _printing_its_env(callers, secret_template) -> ContainerInstance:
    """alice's instance of ``vault``, whose command prints its env (the fake engine)."""
    from containers.engines import engine_for
    from tests.processes import relay_drain

    ContainerTemplate.objects.filter(pk=secret_template.pk).update(command=["env"])
    created = callers["user"].api.post("/api/containers/", {"template": "vault"}, format="json")
    assert created.status_code == 202, created.content
    relay_drain()
    instance = ContainerInstance.objects.get()
    assert instance.container_id, instance.status
    engine_for(instance.runtime).stop(instance.container_id, 0)  # it printed; a follow ends
    return instance


def _logs(caller, instance: ContainerInstance, *, follow: bool) -> str:
    if not follow:
        return caller.api.get(f"/api/containers/{instance.pk}/logs/").json()["logs"]
    from tests.api.helpers import stream_get

    response, body = stream_get(
        caller.api, f"/api/containers/{instance.pk}/logs/?follow=1&seconds=1"
    )
    assert response.status_code == 200, body
    return body.decode()


@pytest.mark.parametrize("follow", [False, True], ids=["tail", "follow"])
def test_logs_hide_secret_values_from_the_owner_and_viewers_but_not_operators(
    callers, secret_template, follow
):
    instance = _printing_its_env(callers, secret_template)
    for role in ("user", "viewer"):
        shown = _logs(callers[role], instance, follow=follow)
        assert SECRET not in shown and "TOKEN=********\n" in shown, (role, shown)
        assert "MODE=debug\n" in shown, (role, shown)
    shown = _logs(callers["operator"], instance, follow=follow)
    assert f"TOKEN={SECRET}\n" in shown, shown


def test_the_admin_instance_page_hides_secret_values_in_logs_from_a_viewer(
    callers, secret_template
):
    from django.urls import reverse

    instance = _printing_its_env(callers, secret_template)
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    page = callers["viewer"].web.get(url).content.decode()
    assert "TOKEN=********" in page and SECRET not in page, page[page.find("TOKEN=") - 200 :]
    assert f"TOKEN={SECRET}" in callers["operator"].web.get(url).content.decode()


def test_a_dag_template_shows_a_node_s_secret_env_as_its_container_template_marks_it(
    callers, secret_template
):
    from django.urls import reverse

    from dags.services import dag_template_save

    node = {"key": "a", "template": "vault", "env": {"TOKEN": SECRET, "MODE": "fast"}}
    dag = dag_template_save(name="with-secret", nodes=[node])
    for role in ("user", "viewer"):
        for path in ("/api/dag-templates/", f"/api/dag-templates/{dag.pk}/"):
            body = callers[role].api.get(path).content.decode()
            assert SECRET not in body and '"TOKEN":"********"' in body, (role, path, body)
            assert '"MODE":"fast"' in body, (role, path, body)
    shown = callers["operator"].api.get(f"/api/dag-templates/{dag.pk}/").json()
    assert shown["nodes"][0]["env"]["TOKEN"] == SECRET, shown
    url = reverse("admin:dags_dagtemplate_change", args=[dag.pk])
    page = callers["viewer"].web.get(url).content.decode()
    assert SECRET not in page and "********" in page, page[page.find("TOKEN") - 200 :]
