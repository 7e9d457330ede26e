"""ContainerInstance admin: create through the service, actions per row, no delete view."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from containers.engines import engine_for
from containers.engines.base import ContainerSpec
from containers.execution.health import runtime_health_record
from containers.models import ContainerEvent, ContainerInstance
from containers.requests.services import container_create_by_template
from containers.states import Status
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RuntimeFactory, TemplateFactory
from tests.placing import place

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:containers_containerinstance_changelist"


def _messages(response, *, with_level: bool = False) -> list:
    found = list(get_messages(response.wsgi_request))
    if with_level:
        return [(m.level_tag, str(m)) for m in found]
    return [str(m) for m in found]


def _act(client, action: str, *instances, **extra):
    return client.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [str(i.pk) for i in instances], **extra},
    )


# --- create ---------------------------------------------------------------------------------


def test_add_goes_through_the_create_service(as_user, operator, template, owner):
    response = as_user(operator).post(
        reverse("admin:containers_containerinstance_add"),
        {"template": template.pk, "owner": owner.pk, "name": "from-admin"},
    )
    assert response.status_code == 302
    instance = ContainerInstance.objects.get()
    assert (instance.name, instance.status, instance.owner) == ("from-admin", "pending", owner)
    assert instance.spec["image"] == template.image  # resolved at request time
    assert OutboxEvent.objects.get().kind == "ContainerCreateRequest"
    event = ContainerEvent.objects.get(instance_id=instance.id)
    assert event.actor == "user:operator"


def test_add_with_env_overrides_the_template_allows_puts_them_in_the_spec(
    as_user, operator, template, owner
):
    template.user_env = ["MODE", "APP_*"]
    template.save(update_fields=["user_env"])
    response = as_user(operator).post(
        reverse("admin:containers_containerinstance_add"),
        {
            "template": template.pk,
            "owner": owner.pk,
            "name": "with-env",
            "env-name": ["MODE", "APP_COLOUR", ""],
            "env-value": ["debug", "$HOME", ""],
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    spec_env = ContainerInstance.objects.get(name="with-env").spec["env"]
    assert (spec_env["MODE"], spec_env["APP_COLOUR"]) == ("debug", "$HOME"), spec_env


@pytest.mark.parametrize(
    "key, says",
    [
        ("SECRET", "does not let users set SECRET"),
        ("LD_PRELOAD", "users may not set LD_PRELOAD"),
        ("1BAD", "not a valid variable name"),
    ],
)
def test_add_with_env_the_policy_refuses_shows_the_error_on_the_form_and_creates_nothing(
    as_user, operator, template, owner, key, says
):
    template.user_env = ["MODE"]
    template.save(update_fields=["user_env"])
    response = as_user(operator).post(
        reverse("admin:containers_containerinstance_add"),
        {"template": template.pk, "owner": owner.pk, "env-name": [key], "env-value": ["x"]},
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["env"] and says in errors["env"][0], errors
    assert says in response.content.decode()
    assert not ContainerInstance.objects.exists()
    assert not OutboxEvent.objects.exists()


def test_the_add_form_offers_env_rows(as_user, operator):
    page = as_user(operator).get(reverse("admin:containers_containerinstance_add"))
    assert page.status_code == 200
    assert 'name="env-name"' in page.content.decode()


def test_add_refused_by_a_full_queue_says_why_and_leaves_nothing(
    as_user, operator, template, owner, gobrave_config
):
    gobrave_config(container={"create_queue_max_pending": 0})
    url = reverse("admin:containers_containerinstance_add")
    response = as_user(operator).post(url, {"template": template.pk, "owner": owner.pk})
    assert response.status_code == 302
    assert response["Location"].startswith(url)  # back to the form, choices kept
    assert f"template={template.pk}" in response["Location"]
    assert any("Create refused" in m and "queue is full" in m for m in _messages(response))
    assert not ContainerInstance.objects.exists()
    assert not OutboxEvent.objects.exists()


def test_add_with_no_matching_runtime_names_the_constraint(as_user, operator, owner):
    from tests.factories import TemplateFactory

    template = TemplateFactory(constraints={"gpu": "yes"})
    response = as_user(operator).post(
        reverse("admin:containers_containerinstance_add"),
        {"template": template.pk, "owner": owner.pk},
    )
    assert any("gpu=yes" in m for m in _messages(response))
    assert not ContainerInstance.objects.exists()


# --- actions --------------------------------------------------------------------------------


def test_stop_summarises_done_nothing_to_do_and_refused(as_user, operator):
    running = InstanceFactory(name="a-running", status=Status.RUNNING)
    also = InstanceFactory(name="a2-running", status=Status.RUNNING)
    stopping = InstanceFactory(name="b-stopping", status=Status.STOPPING)
    stopped = InstanceFactory(name="b2-stopped", status=Status.STOPPED)
    starting = InstanceFactory(name="c-starting", status=Status.STARTING)
    response = _act(as_user(operator), "stop_instances", running, also, stopping, stopped, starting)
    assert response.status_code == 302
    messages = _messages(response, with_level=True)
    assert len(messages) == 3, messages
    done, nothing, refused = sorted(
        messages, key=lambda m: ["success", "info", "warning"].index(m[0])
    )
    assert done == ("success", "Stop requested for 2 instances: a-running, a2-running.")
    assert nothing == (
        "info",
        "Nothing to stop for 2 instances: b-stopping (stopping), b2-stopped (stopped).",
    )
    assert refused == (
        "warning",
        "Stop refused for 1 instance: c-starting: cannot stop c-starting: it is starting.",
    )
    running.refresh_from_db()
    assert running.status == Status.STOP_PENDING
    assert set(OutboxEvent.objects.values_list("kind", flat=True)) == {"ContainerStopRequest"}
    assert OutboxEvent.objects.count() == 2
    actors = set(
        ContainerEvent.objects.filter(to_status=Status.STOP_PENDING).values_list("actor", flat=True)
    )
    assert actors == {"user:operator"}


def test_start_action_requests_a_start(as_user, operator):
    stopped = InstanceFactory(name="s", status=Status.STOPPED)
    response = _act(as_user(operator), "start_instances", stopped)
    assert _messages(response) == ["Start requested for 1 instance: s."]
    stopped.refresh_from_db()
    assert stopped.status == Status.START_PENDING


def test_start_is_not_asked_of_a_running_instance(as_user, operator):
    running = InstanceFactory(name="r", status=Status.RUNNING)
    response = _act(as_user(operator), "start_instances", running)
    assert _messages(response) == ["Nothing to start for 1 instance: r (running)."]
    running.refresh_from_db()
    assert running.status == Status.RUNNING
    assert not OutboxEvent.objects.exists()


def test_delete_action_first_asks_listing_what_will_be_removed(as_user, operator):
    failed = InstanceFactory(name="f", status=Status.FAILED, container_id="c0ffee" * 10)
    deleting = InstanceFactory(name="d", status=Status.DELETING)
    starting = InstanceFactory(name="s", status=Status.STARTING)
    client = as_user(operator)
    page = _act(client, "delete_instances", failed, deleting, starting)
    assert page.status_code == 200
    html = page.content.decode()
    # A start under way may be deleted too (contract §2: a start may wait long for its
    # engine, and its user can always give it up).
    assert "Delete 2 instances?" in html and "removed from its engine" in html
    assert "c0ffeec0ffee" in html and f"gb-{failed.id}" in html
    assert "Already being deleted (nothing to do): d." in html
    assert "Cannot be deleted" not in html
    failed.refresh_from_db()
    assert failed.status == Status.FAILED and not OutboxEvent.objects.exists()

    response = _act(client, "delete_instances", failed, deleting, starting, confirm="yes")
    messages = _messages(response)
    assert "Delete requested for 2 instances: f, s." in messages, messages
    assert "Nothing to delete for 1 instance: d (deleting)." in messages
    assert not any(m.startswith("Delete refused") for m in messages), messages
    failed.refresh_from_db()
    starting.refresh_from_db()
    assert (failed.status, starting.status) == (Status.DELETE_PENDING, Status.DELETE_PENDING)


def test_action_from_the_instance_page_returns_to_it(as_user, operator):
    instance = InstanceFactory(status=Status.RUNNING)
    page = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    response = _act(as_user(operator), "stop_instances", instance, _next=page)
    assert response["Location"] == page


def test_action_never_redirects_off_site(as_user, operator):
    instance = InstanceFactory(status=Status.RUNNING)
    response = _act(as_user(operator), "stop_instances", instance, _next="https://evil.test/")
    assert response["Location"] == reverse(CHANGELIST)


# --- deletion is disabled --------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    ["containers_containerinstance", "outbox_outboxevent", "containers_containerevent"],
)
def test_django_delete_is_disabled(as_user, superuser, model):
    instance = InstanceFactory(status=Status.RUNNING)
    rows = {
        "containers_containerinstance": instance,
        "outbox_outboxevent": OutboxEvent.objects.create(
            kind="ContainerStopRequest",
            queue="control",
            aggregate_id=str(instance.pk),
            available_at=instance.created_at,
        ),
        "containers_containerevent": ContainerEvent.objects.create(
            instance_id=instance.pk, instance_name=instance.name, kind="x"
        ),
    }
    row = rows[model]
    client = as_user(superuser)
    changelist = client.get(reverse(f"admin:{model}_changelist"))
    form = changelist.context["action_form"]
    assert form is None or "delete_selected" not in {n for n, _ in form.fields["action"].choices}
    delete_url = reverse(f"admin:{model}_delete", args=[row.pk])
    assert client.get(delete_url).status_code == 403
    assert client.post(delete_url, {"post": "yes"}).status_code == 403
    client.post(
        reverse(f"admin:{model}_changelist"),
        {"action": "delete_selected", "_selected_action": [str(row.pk)], "post": "yes"},
    )
    assert type(row).objects.filter(pk=row.pk).exists()


def test_status_cannot_be_changed_from_the_instance_page(as_user, superuser):
    instance = InstanceFactory(status=Status.RUNNING)
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    client = as_user(superuser)
    page = client.get(url)
    assert 'name="status"' not in page.content.decode()
    client.post(url, {"status": "stopped", "name": "renamed"})
    instance.refresh_from_db()
    assert (instance.status, instance.name) == (Status.RUNNING, instance.name)


# --- the instance page -----------------------------------------------------------------------


def test_instance_page_shows_history_and_logs(as_user, operator, fake_runtime):
    instance = InstanceFactory(status=Status.RUNNING, runtime=fake_runtime)
    engine = engine_for(fake_runtime)
    ref = engine.create(ContainerSpec(name=instance.container_name, image="i", labels={}))
    ContainerInstance.objects.filter(pk=instance.pk).update(container_id=ref)
    ContainerEvent.objects.create(
        instance_id=instance.pk, instance_name=instance.name, kind="runtime", message="hello"
    )
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    response = as_user(operator).get(url)
    content = response.content.decode()
    assert response.status_code == 200
    assert "hello" in content
    assert "fake log line" in content
    assert f"instance_id={instance.pk}" in content  # link to the full history


def test_instance_page_shows_where_the_instance_was_placed_and_why(
    as_user, viewer, fake_runtime, owner
):
    RuntimeFactory(name="spare", base_url=f"{fake_runtime.base_url}-spare")
    made = container_create_by_template(
        template=TemplateFactory(name="placed"), owner=owner, actor="t"
    )
    placed = place(made)
    assert placed.placement_reason == "spread: fake 0 least loaded of fake, spare", vars(placed)
    url = reverse("admin:containers_containerinstance_change", args=[placed.pk])
    response = as_user(viewer).get(url)
    assert response.status_code == 200
    content = response.content.decode()
    row = re.search(r'<div class="[^"]*field-placement_reason.*?</div>\s*</div>', content, re.S)
    assert row and "spread: fake 0 least loaded of fake, spare" in row.group(0), content[:3000]


def test_instance_page_survives_an_unreachable_engine(as_user, operator):
    runtime = RuntimeFactory(driver="docker", base_url="unix:///nonexistent/docker.sock")
    instance = InstanceFactory(status=Status.RUNNING, runtime=runtime, container_id="abc")
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    response = as_user(operator).get(url)
    assert response.status_code == 200
    assert "logs unavailable from runtime" in response.content.decode()


def test_search_finds_by_name_and_by_uuid(as_user, operator):
    wanted = InstanceFactory(name="needle-1")
    other = InstanceFactory(name="hay")
    client = as_user(operator)
    by_name = client.get(reverse(CHANGELIST), {"q": "needle"})
    assert list(by_name.context["cl"].result_list) == [wanted]
    by_uuid = client.get(reverse(CHANGELIST), {"q": str(other.pk)})
    assert list(by_uuid.context["cl"].result_list) == [other]
    garbage = client.get(reverse(CHANGELIST), {"q": "not-a-uuid"})
    assert garbage.status_code == 200


@pytest.mark.parametrize(
    "term",
    ["abcdef12", "ABCDEF123456", "abcdef12-3456", "abcdef1234564789", "abcdef12-3456-4789-8abc"],
)
def test_search_finds_by_an_id_prefix_dashed_or_not_as_the_api_and_cli_do(as_user, operator, term):
    wanted = InstanceFactory(name="wanted", id=uuid.UUID("abcdef12-3456-4789-8abc-def012345678"))
    InstanceFactory(name="other", id=uuid.UUID("abcdef13-3456-4789-8abc-def012345678"))
    response = as_user(operator).get(reverse(CHANGELIST), {"q": term})
    found = [row.name for row in response.context["cl"].result_list]
    assert found == [wanted.name], found


def test_search_by_fewer_than_eight_hex_digits_matches_no_id(as_user, operator):
    InstanceFactory(name="wanted", id=uuid.UUID("abcdef12-3456-4789-8abc-def012345678"))
    response = as_user(operator).get(reverse(CHANGELIST), {"q": "abcdef1"})
    found = [row.name for row in response.context["cl"].result_list]
    assert found == [], found


@pytest.mark.parametrize("param", ["status__exact", "template__id__exact", "runtime__id__exact"])
def test_filters_narrow_the_changelist(as_user, operator, param):
    wanted = InstanceFactory(status=Status.FAILED)
    InstanceFactory(status=Status.RUNNING)
    value = {
        "status__exact": "failed",
        "template__id__exact": wanted.template_id,
        "runtime__id__exact": wanted.runtime_id,
    }[param]
    response = as_user(operator).get(reverse(CHANGELIST), {param: value})
    assert list(response.context["cl"].result_list) == [wanted]


def test_status_template_runtime_and_owner_filters_are_offered(as_user, operator):
    InstanceFactory()
    InstanceFactory()  # a filter with a single choice is not shown
    response = as_user(operator).get(reverse(CHANGELIST))
    titles = {spec.title for spec in response.context["cl"].filter_specs}
    assert {"status", "template", "runtime", "owner"} <= titles


def test_status_is_shown_as_a_coloured_badge(as_user, operator):
    InstanceFactory(status=Status.FAILED)
    response = as_user(operator).get(reverse(CHANGELIST))
    assert 'class="gb-badge"' in response.content.decode()
    assert "#dc3545" in response.content.decode()


# --- live updates ---------------------------------------------------------------------------

LIVE = "admin:containers_containerinstance_live"


def test_live_answers_what_the_list_and_page_show(as_user, viewer):
    failed = InstanceFactory(
        name="f", status=Status.FAILED, exit_code=3, status_reason="exited with 3"
    )
    gone = uuid.uuid4()
    client = as_user(viewer)
    url = reverse(LIVE)
    response = client.get(url, {"id": [str(failed.id), str(gone), "not-a-uuid"]})
    assert response.status_code == 200, response.content
    body = response.json()["instances"]
    assert set(body) == {str(failed.id), str(gone)}
    assert body[str(gone)] is None
    row = body[str(failed.id)]
    assert row["status"] == "failed"
    assert "exit 3: exited with 3" in row["status_html"] and "ago" in row["changed_html"]

    detail = client.get(url, {"id": str(failed.id), "detail": "1"}).json()["instances"]
    item = detail[str(failed.id)]
    assert item["fields"]["exit_code"] == "3"
    assert item["offered"] == {"start": False, "stop": False, "delete": True}
    assert "No events." in item["events_html"]


def test_live_query_count_does_not_grow_with_the_rows(as_user, viewer, django_assert_num_queries):
    client = as_user(viewer)
    url = reverse(LIVE)
    one = [str(InstanceFactory().id)]
    with CaptureQueriesContext(connection) as few:
        client.get(url, {"id": one})
    many = one + [str(InstanceFactory().id) for _ in range(20)]
    with django_assert_num_queries(len(few.captured_queries)):
        client.get(url, {"id": many})


def test_live_is_refused_to_who_may_not_see_instances(client, outsider):
    client.force_login(outsider)
    response = client.get(reverse(LIVE), {"id": str(uuid.uuid4())})
    assert response.status_code == 302 and reverse("admin:login") in response["Location"]


@pytest.mark.parametrize(
    "status, container_id, says",
    [
        (Status.PENDING, "", "not created yet; it will be <code>gb-"),
        (
            Status.CREATING,
            "",
            "(being created: the engine's id shows once the engine has made it)",
        ),
        (Status.CREATING, "f00d" * 16, '<code title="' + "f00d" * 16 + '">f00df00df00d</code>'),
        (Status.FAILED, "", "(no container on record)"),
    ],
)
def test_the_container_line_says_what_the_engine_holds(
    as_user, operator, status, container_id, says
):
    instance = InstanceFactory(status=status, container_id=container_id)
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    assert says in as_user(operator).get(url).content.decode()


def test_the_history_title_counts_the_rows_the_live_refresh_draws(as_user, viewer):
    instance = InstanceFactory(name="h")

    def add(n: int) -> None:
        for i in range(n):
            ContainerEvent.objects.create(
                instance_id=instance.id, instance_name="h", kind="note", message=f"e{i}"
            )

    add(4)
    client = as_user(viewer)
    page = client.get(
        reverse("admin:containers_containerinstance_change", args=[instance.pk])
    ).content.decode()
    assert "latest 4" in page
    add(2)
    live = client.get(reverse(LIVE), {"id": str(instance.id), "detail": "1"}).json()
    fragment = live["instances"][str(instance.id)]["events_html"]
    assert "latest 6" in fragment and fragment.count(">note</td>") == 6


def test_the_instance_page_and_the_event_log_show_event_kinds_in_words(as_user, viewer):
    instance = InstanceFactory(name="w")
    ContainerEvent.objects.create(
        instance_id=instance.id, instance_name="w", kind="ContainerCreateRequest"
    )
    client = as_user(viewer)
    page = client.get(
        reverse("admin:containers_containerinstance_change", args=[instance.pk])
    ).content.decode()
    log = client.get(reverse("admin:containers_containerevent_changelist")).content.decode()
    for html in (page, log):
        assert "create requested" in html
        assert ">ContainerCreateRequest<" not in html


# --- lifecycle policies ---------------------------------------------------------------------


def _timed(name: str, extendable_by: str = "owner") -> ContainerInstance:
    import datetime as dt

    from django.utils import timezone

    instance = InstanceFactory(name=name, status=Status.RUNNING)
    policy = {"max_lifetime": 3600, "extendable_by": extendable_by, "extend_max": 7200}
    ContainerInstance.objects.filter(pk=instance.pk).update(
        spec={**instance.spec, "policy": policy},
        stop_at=timezone.now() + dt.timedelta(hours=1),
    )
    return ContainerInstance.objects.get(pk=instance.pk)


def test_instance_page_says_when_a_policy_stops_it_and_why(as_user, operator):
    instance = _timed("timed")
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    content = as_user(operator).get(url).content.decode()
    assert "max_lifetime: running longer than 1h" in content


def test_extend_action_extends_what_the_template_allows_and_reports_refusals(as_user, operator):
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    mine, fixed = _timed("a-extendable"), _timed("b-fixed", extendable_by="nobody")
    response = _act(as_user(operator), "extend_instances", mine, fixed)
    messages = _messages(response)
    assert messages[0] == "Extended by an hour: 1 instance: a-extendable."
    assert messages[1].startswith("Extension refused for 1 instance: b-fixed: cannot extend")
    assert ContainerInstance.objects.get(pk=mine.pk).extended_seconds == 3600
    assert ContainerInstance.objects.get(pk=fixed.pk).stop_at == fixed.stop_at


def test_the_change_page_says_an_instance_s_engine_is_unreachable(
    as_user, operator, template, owner
):
    instance = InstanceFactory(owner=owner, template=template)
    ContainerInstance.objects.filter(pk=instance.pk).update(status=Status.RUNNING)
    runtime_health_record(runtime_id=instance.runtime_id, reachable=False, error="link down")
    page = as_user(operator).get(
        reverse("admin:containers_containerinstance_change", args=[instance.pk])
    )
    assert page.status_code == 200
    assert "engine unreachable since " in page.content.decode(), page.content.decode()[:2000]
    assert "link down" in page.content.decode()
