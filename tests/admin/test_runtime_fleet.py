"""The runtime changelist as operators see a fleet (health and since when, load, labels,
cordon state) and its cordon, uncordon and decommission actions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from containers.execution.health import runtime_health_record
from containers.fleet.services import runtime_decommission
from containers.models import ContainerEvent, ContainerInstance, Runtime, RuntimeEvent
from dags.models import DagRun
from outbox.models import OutboxEvent
from tests.admin.test_other_admins import _engine_calls
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory, TemplateFactory
from tests.plans import plan_of

pytestmark = pytest.mark.django_db

GONE = "tcp://127.0.0.1:9"  # nothing listens there
CHANGELIST = "admin:containers_runtime_changelist"


def _row(content: str, name: str) -> str:
    """The changelist's row of the runtime ``name``."""
    start = content.index(f'aria-label="Select this object for an action - {name}"')
    return content[start : content.index("</tr>", start)]


def _action(client, action: str, runtimes, **extra):
    data = {"action": action, "_selected_action": [r.pk for r in runtimes], **extra}
    return client.post(reverse(CHANGELIST), data)


def test_the_changelist_shows_health_since_load_labels_and_cordon_state(as_user, operator):
    busy = RuntimeFactory(name="busy", labels={"zone": "b", "gpu": "yes"}, max_containers=10)
    idle = RuntimeFactory(name="idle", labels={}, max_concurrency=2)
    runtime_health_record(runtime_id=busy.pk, reachable=False, error="connection refused")
    InstanceFactory(runtime=busy, status="running")
    InstanceFactory(runtime=busy, status="stopped")
    InstanceFactory(runtime=busy, status="delete_pending")  # its place is free already
    slot = InstanceFactory(runtime=busy, status="creating")
    RequestFactory(instance=slot, status="processing", lease_expires_at="2999-01-01T00:00Z")
    Runtime.objects.filter(pk=idle.pk).update(cordoned=True, cordoned_by="user:op")
    content = as_user(operator).get(reverse(CHANGELIST)).content.decode()
    row = _row(content, "busy")
    assert 'data-instances="3" data-slots="1">containers 3/10<br>slots 1/∞' in row, row
    assert "<code>gpu=yes</code> <code>zone=b</code>" in row, row
    assert ">no answer since " in row and "connection refused" in row, row
    assert ">open<" in row, row
    row = _row(content, "idle")
    assert 'data-instances="0" data-slots="0">containers 0/∞<br>slots 0/2' in row, row
    assert ">cordoned<" in row and 'title="by user:op"' in row, row


def test_cordon_and_uncordon_actions_go_through_the_services(as_user, operator):
    one, two = RuntimeFactory(name="one"), RuntimeFactory(name="two")
    client = as_user(operator)
    assert 'name="reason"' in client.get(reverse(CHANGELIST)).content.decode()
    response = _action(client, "cordon_runtimes", [one, two], reason=" kernel upgrade ")
    assert response.status_code == 302, response.content
    rows = {r.name: (r.cordoned, r.cordoned_by) for r in Runtime.objects.filter(cordoned=True)}
    assert rows == {"one": (True, "user:operator"), "two": (True, "user:operator")}, rows
    _action(client, "uncordon_runtimes", [two])
    assert list(Runtime.objects.filter(cordoned=True).values_list("name", flat=True)) == ["one"]
    said = list(
        RuntimeEvent.objects.filter(runtime_id=two.pk).order_by("id").values_list("kind", "message")
    )
    assert said == [("engine.cordoned", "kernel upgrade"), ("engine.uncordoned", "")], said


def test_a_viewer_is_offered_no_fleet_action_and_cannot_post_one(as_user, viewer):
    runtime = RuntimeFactory(name="r")
    client = as_user(viewer)
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "cordon_runtimes" not in page and "decommission_runtimes" not in page, page
    _action(client, "cordon_runtimes", [runtime])
    _action(client, "decommission_runtimes", [runtime], confirm="yes")
    row = Runtime.objects.get(pk=runtime.pk)
    assert (row.cordoned, row.decommissioned_at) == (False, None), vars(row)


def test_decommission_asks_first_showing_instances_containers_and_dag_runs(
    as_user, operator, owner, monkeypatch
):
    gone = RuntimeFactory(name="gone", driver="docker", base_url=GONE)
    made = InstanceFactory(runtime=gone, status="running", container_id="0123456789abcdef")
    never = InstanceFactory(runtime=gone, status="pending")
    run = DagRun.objects.create(template_name="nightly", owner=owner, runtime=gone)
    asked = _engine_calls(monkeypatch)
    page = _action(as_user(operator), "decommission_runtimes", [gone])
    content = page.content.decode()
    assert page.status_code == 200, content
    for shown in (made.name, f"gb-{made.id}", "0123456789ab", never.name, f"gb-{never.id}"):
        assert shown in content, (shown, content)
    assert "(never made)" in content and f"DAG run {run} (pending)" in content, content
    assert 'id="gb-confirm-decommission"' in content, content
    assert 'name="reason"' in content, content
    assert ContainerInstance.objects.filter(runtime=gone).count() == 2  # nothing done yet
    assert asked == []


def test_decommission_on_yes_forgets_without_an_engine_call_and_the_row_can_go(
    as_user, operator, superuser, monkeypatch
):
    gone = RuntimeFactory(name="gone", driver="docker", base_url=GONE)
    instance = InstanceFactory(runtime=gone, status="running")
    request = RequestFactory(instance=instance, kind="ContainerStopRequest")
    asked = _engine_calls(monkeypatch)
    client = as_user(operator)
    response = _action(
        client, "decommission_runtimes", [gone], confirm="yes", reason="  host sold  "
    )
    assert response.status_code == 302, response.content
    assert asked == []
    begun = RuntimeEvent.objects.get(runtime_id=gone.pk, kind="engine.decommissioning")
    assert begun.message.endswith(": host sold"), begun.message
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
    kinds = list(
        ContainerEvent.objects.filter(instance_id=instance.id)
        .order_by("id")
        .values_list("kind", "to_status")
    )
    assert kinds == [
        ("decommission", "delete_pending"),
        ("decommission", "deleting"),
        ("ContainerDeleted", ""),
    ], kinds
    request.refresh_from_db()
    assert (request.status, request.outcome) == ("sent", "superseded"), vars(request)
    messages = client.get(reverse(CHANGELIST)).content.decode()
    assert "Decommissioned gone: 1 instance forgotten" in messages, messages
    assert ">decommissioned<" in messages, messages
    delete = reverse("admin:containers_runtime_delete", args=[gone.pk])
    as_user(operator).post(delete, {"post": "yes"})  # the operator lacks delete_runtime
    assert Runtime.objects.filter(pk=gone.pk).exists()
    assert OutboxEvent.objects.filter(aggregate_id=str(instance.id), status="pending").count() == 0
    response = as_user(superuser).post(delete, {"post": "yes"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not Runtime.objects.filter(pk=gone.pk).exists()
    deleted = RuntimeEvent.objects.get(runtime_id=gone.pk, kind="engine.deleted")
    assert (deleted.actor, deleted.runtime_name) == ("user:root", "gone"), vars(deleted)


def test_the_dashboard_shows_each_engine_health_since_placement_load_and_labels(as_user, operator):
    busy = RuntimeFactory(name="busy", labels={"zone": "b"}, max_containers=5, max_concurrency=3)
    RuntimeFactory(name="idle", labels={})
    runtime_health_record(runtime_id=busy.pk, reachable=True)
    Runtime.objects.filter(name="idle").update(cordoned=True)
    InstanceFactory(runtime=busy, status="running")
    slot = InstanceFactory(runtime=busy, status="starting")
    RequestFactory(instance=slot, status="processing", lease_expires_at="2999-01-01T00:00Z")
    url = reverse("admin:containers_dashboard") + "?fragment=1"
    content = as_user(operator).get(url).content.decode()
    start = content.index('id="gb-engine-busy"')
    row = content[start : content.index("</tr>", start)]
    assert "reachable since " in row and "<code>zone=b</code>" in row, row
    assert '"gb-engine-placement">open<' in row, row
    assert 'class="gb-engine-instances" data-value="2">2/5<' in row, row
    assert 'class="gb-engine-slots" data-value="1">1/3<' in row, row
    start = content.index('id="gb-engine-idle"')
    row = content[start : content.index("</tr>", start)]
    assert '"gb-engine-placement">cordoned<' in row and "not checked" not in row, row


def test_the_actions_and_the_form_write_the_engines_history_with_the_user(as_user, operator):
    runtime = RuntimeFactory(name="kept", max_containers=2)
    client = as_user(operator)
    _action(client, "cordon_runtimes", [runtime])
    form = {
        "name": "kept",
        "driver": "fake",
        "base_url": runtime.base_url,
        "labels": "{}",
        "kube_volume_size": "1Gi",
        "kube_access_mode": "ReadWriteOnce",
        "max_containers": "4",  # and ``enabled`` unticked
    }
    url = reverse("admin:containers_runtime_change", args=[runtime.pk])
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    entries = RuntimeEvent.objects.filter(runtime_id=runtime.pk).order_by("id")
    shown = [(e.kind, e.actor, e.from_status, e.to_status, e.data) for e in entries]
    assert shown == [
        ("engine.cordoned", "user:operator", "open", "cordoned", {}),
        (
            "engine.changed",
            "user:operator",
            "",
            "",
            {"labels": {"from": {"engine": "fake", "node": "kept"}, "to": {}}},
        ),
        ("engine.disabled", "user:operator", "enabled", "disabled", {}),
        ("engine.capacity", "user:operator", "", "", {"max_containers": {"from": 2, "to": 4}}),
    ], shown
    row = Runtime.objects.get(pk=runtime.pk)
    assert (row.enabled, row.max_containers, row.labels) == (False, 4, {}), vars(row)
    changelist = reverse("admin:containers_runtimeevent_changelist")
    page = client.get(changelist, {"kind": "engine.disabled"})
    assert list(page.context["cl"].result_list) == [entries[2]]
    # the runtime's page links to its history
    RuntimeEvent.objects.create(runtime_id=0, runtime_name="other", kind="engine.cordoned")
    assert f'href="{changelist}?runtime_id={runtime.pk}"' in client.get(url).content.decode()
    page = client.get(changelist, {"runtime_id": runtime.pk})
    listed = page.context["cl"].result_list
    assert {e.pk for e in listed} == {e.pk for e in entries}, listed


def test_a_runtimes_history_link_follows_its_id_through_a_rename_and_a_reused_name(
    as_user, operator
):
    """Its entries keep the name the runtime had: by name, a renamed runtime lost its
    history and a new one under an old name showed its predecessor's."""
    client = as_user(operator)
    first = RuntimeFactory(name="alpha")
    _action(client, "cordon_runtimes", [first])
    Runtime.objects.filter(pk=first.pk).update(name="beta")  # renamed
    _action(client, "uncordon_runtimes", [Runtime.objects.get(pk=first.pk)])
    second = RuntimeFactory(name="alpha")  # a new runtime under the old name
    _action(client, "cordon_runtimes", [second])
    changelist = reverse("admin:containers_runtimeevent_changelist")
    shown = {}
    for runtime in (first, second):
        page = client.get(reverse("admin:containers_runtime_change", args=[runtime.pk]))
        link = f"{changelist}?runtime_id={runtime.pk}"
        assert f'href="{link}"' in page.content.decode(), runtime.name
        changelist_page = client.get(link).context["cl"]
        shown[runtime.pk] = sorted((e.runtime_name, e.kind) for e in changelist_page.result_list)
    assert shown == {
        first.pk: [("alpha", "engine.cordoned"), ("beta", "engine.uncordoned")],
        second.pk: [("alpha", "engine.cordoned")],
    }, shown
    # the page's query reads the runtime's entries in its order on rtevent_history
    plan = plan_of(*changelist_page.queryset[:100].query.sql_with_params())
    assert "rtevent_history" in plan and "Sort" not in plan, plan


@pytest.mark.parametrize("value", ["alpha", "-1", "1.5", "99999999999999999999999"])
def test_a_runtime_id_filter_that_is_not_an_id_is_the_invalid_filter_page(as_user, operator, value):
    changelist = reverse("admin:containers_runtimeevent_changelist")
    response = as_user(operator).get(changelist, {"runtime_id": value})
    assert response.status_code == 302 and response["Location"].endswith("?e=1"), response


def test_the_runtime_form_refuses_a_kubernetes_runtime_templates_refused_there_could_use(
    as_user, superuser, tmp_path
):
    TemplateFactory(name="as-root", constraints={"gpu": "yes"}, security={"user": 0})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    form = {
        "name": "cluster",
        "driver": "kubernetes",
        "base_url": "unix:///var/run/docker.sock",  # the form's default; derived for a cluster
        "kube_namespace": "users",
        "kube_config": str(kubeconfig),
        "kube_volume_size": "1Gi",
        "kube_access_mode": "ReadWriteOnce",
        "labels": '{"gpu": "yes"}',
        "enabled": "on",
    }
    response = as_user(superuser).post(reverse("admin:containers_runtime_add"), form)
    assert response.status_code == 200, response.status_code
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["labels"] and "as-root" in errors["labels"][0], errors
    assert not Runtime.objects.filter(name="cluster").exists()


def test_the_runtime_form_refuses_to_switch_a_decommissioned_runtime_on(
    as_user, operator, monkeypatch
):
    gone = RuntimeFactory(name="gone", driver="docker", base_url=GONE)
    _engine_calls(monkeypatch)
    runtime_decommission(runtime_id=gone.pk, actor="user:op")
    form = {
        "name": "gone",
        "driver": "docker",
        "base_url": GONE,
        "labels": "{}",
        "kube_volume_size": "1Gi",
        "kube_access_mode": "ReadWriteOnce",
        "enabled": "on",
    }
    url = reverse("admin:containers_runtime_change", args=[gone.pk])
    response = as_user(operator).post(url, form)
    assert response.status_code == 200, response.status_code  # the form again, never a 500
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["enabled"] and "decommissioned" in errors["enabled"][0], errors
    assert Runtime.objects.get(pk=gone.pk).enabled is False
