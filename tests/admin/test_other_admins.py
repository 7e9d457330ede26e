"""Templates, runtimes, the outbox, the audit log and the orphans in the admin."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from containers.execution.health import runtime_health_record
from containers.models import ContainerEvent, ContainerTemplate, OrphanContainer, Runtime
from outbox.models import OutboxEvent, OutboxStatus
from tests.admin.conftest import make_user
from tests.factories import InstanceFactory, RuntimeFactory, TemplateFactory

pytestmark = pytest.mark.django_db


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _missing_on(runtime, image: str) -> None:
    from containers.engines import engine_for

    (engine_for(runtime).root / f"missing-image-{image}").write_text("")


# --- templates ------------------------------------------------------------------------------

VALID = {
    "name": "web",
    "image": "busybox:latest",
    "pull_policy": "never",
    "command": '["sleep", "600"]',
    "env": '{"HOME": "$WORKSPACE_PATH"}',
    "volumes": '[{"source": "$WORKSPACE_PATH", "target": "/work", "read_only": false}]',
    "resources": '{"cpu": 0.5, "memory": "64m"}',
    "constraints": '{"engine": "fake"}',
}


def test_a_valid_template_is_saved(as_user, operator):
    response = as_user(operator).post(reverse("admin:containers_containertemplate_add"), VALID)
    assert response.status_code == 302
    assert ContainerTemplate.objects.get(name="web").resources == {"cpu": 0.5, "memory": "64m"}


def test_the_template_form_sets_the_lifecycle_policies(as_user, operator):
    fields = {"max_lifetime": "3600", "workspace_retention": "86400", "extendable_by": "staff"}
    response = as_user(operator).post(
        reverse("admin:containers_containertemplate_add"), {**VALID, **fields}
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    saved = ContainerTemplate.objects.get(name="web")
    policies = (saved.max_lifetime, saved.workspace_retention, saved.extendable_by)
    assert policies == (3600, 86400, "staff"), policies
    assert saved.idle_timeout is None  # empty: the installation's default


def test_template_form_help_shows_an_example_for_resources_constraints_and_security(
    as_user, operator
):
    form = (
        as_user(operator)
        .get(reverse("admin:containers_containertemplate_add"))
        .context["adminform"]
        .form
    )
    assert '{"cpu": 0.5, "memory": "256m"}' in str(form.fields["resources"].help_text)
    assert '{"zone": "eu-1"}' in str(form.fields["constraints"].help_text)
    assert '{"user": "owner", "network": "none"}' in str(form.fields["security"].help_text)


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("env", '{"1BAD": "x"}', "env: '1BAD' is not a valid variable name"),
        ("env", "A=1\nNOEQUALS", "Line 2: write NAME=value."),
        ("env", "A=1\nA=2", "Line 2: A is set twice."),
        ("env", '{"A": ', "Not valid JSON"),
        ("volumes", '[{"source": "/a", "target": "relative"}]', "volumes[0].target"),
        ("volumes", '{"a": 1}', "volumes[0].source"),
        (
            "volumes",
            "/etc:/host-etc",
            "volumes[0].source: /etc is outside the allowed volume roots",
        ),
        ("resources", '{"memory": "1k"}', "resources.memory: must be bytes or a size"),
        ("resources", '{"gpus": 1}', "resources.gpus: not a key (keys are cpu, memory and pids)"),
        ("resources", "[1]", 'resources: must be an object such as {"cpu": 0.5'),
        ("volumes", '["$WORKSPACE_PATH/sub:/w"]', "never a path below it"),
        ("volumes", '["/proc:/p"]', "/proc is never mounted"),
        ("image", "bad image!", "image: 'bad image!' is not an image reference"),
        ("security", '{"cap_add": ["SYS_ADMIN"]}', "security.cap_add: SYS_ADMIN is never"),
        ("constraints", '{"engine": ["a"]}', "constraints.engine: must be a text or number"),
        ("constraints", '["a"]', 'constraints: must map label names to values such as {"zone"'),
        ("security", '{"usr": "x"}', "security.usr: not a key (keys are user, cap_add,"),
        ("command", '["sleep", 6]', "command: must be a list of at most 256 strings"),
    ],
)
def test_template_validation_names_the_bad_field(as_user, operator, field, value, says):
    response = as_user(operator).post(
        reverse("admin:containers_containertemplate_add"), {**VALID, field: value}
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert says in errors[field][0]
    assert not ContainerTemplate.objects.exists()


@pytest.mark.parametrize(
    "typed, stored",
    [
        ("sleep 600", ["sleep", "600"]),
        ("sh -c 'echo hi > /tmp/x && true'", ["sh", "-c", "echo hi > /tmp/x && true"]),
        ('printf "%s\\n" a\\ b', ["printf", "%s\\n", "a b"]),
        ('["sleep", "5"]', ["sleep", "5"]),
        ("", []),
    ],
)
def test_a_typed_command_is_split_as_a_shell_would_and_drawn_back_the_same(
    as_user, operator, typed, stored
):
    client = as_user(operator)
    response = client.post(
        reverse("admin:containers_containertemplate_add"), {**VALID, "command": typed}
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    template = ContainerTemplate.objects.get(name="web")
    assert template.command == stored, template.command
    page = client.get(reverse("admin:containers_containertemplate_change", args=[template.pk]))
    shown = page.context["adminform"].form["command"].value()
    drawn = page.context["adminform"].form.fields["command"].prepare_value(shown)
    resaved = page.context["adminform"].form.fields["command"].clean(drawn)
    assert resaved == stored, (drawn, resaved)


def test_a_typed_command_with_an_open_quote_is_refused_on_the_form(as_user, operator):
    response = as_user(operator).post(
        reverse("admin:containers_containertemplate_add"), {**VALID, "command": "echo 'hi"}
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "quotation" in errors["command"][0], errors
    assert not ContainerTemplate.objects.exists()


def test_template_fields_take_a_plain_command_and_text_rows(as_user, operator, gobrave_config):
    """A form posted as text (a script, an older page): one row a line, still accepted."""
    gobrave_config(container={"allowed_volume_roots": ["/srv"]})
    typed = {
        **VALID,
        "command": "sleep 600",
        "env": "MODE=debug\nHOME=$WORKSPACE_PATH\n",
        "volumes": "$WORKSPACE_PATH:/work\n/srv/data:/data:ro",
    }
    response = as_user(operator).post(reverse("admin:containers_containertemplate_add"), typed)
    assert response.status_code == 302, response.context["adminform"].form.errors
    template = ContainerTemplate.objects.get(name="web")
    assert template.command == ["sleep", "600"]  # split as a shell splits words
    assert template.env == {"MODE": "debug", "HOME": "$WORKSPACE_PATH"}
    assert template.volumes == [
        {"source": "$WORKSPACE_PATH", "target": "/work", "read_only": False},
        {"source": "/srv/data", "target": "/data", "read_only": True},
    ]


def _rows(env: list[tuple[str, str]], volumes: list[tuple[str, str, str]]) -> dict:
    """The template form as the page posts it: one input per cell, an empty spare row."""
    form = {k: v for k, v in VALID.items() if k not in ("env", "volumes")}
    env = [*env, ("", "")]
    volumes = [*volumes, ("", "", "rw")]
    form["env-name"], form["env-value"] = [r[0] for r in env], [r[1] for r in env]
    form["volumes-source"] = [r[0] for r in volumes]
    form["volumes-target"] = [r[1] for r in volumes]
    form["volumes-mode"] = [r[2] for r in volumes]
    return form


def _cells(html: str, name: str) -> list[str]:
    return re.findall(rf'name="{name}" value="([^"]*)"', html)


def test_template_env_and_volumes_are_saved_from_rows_and_drawn_as_rows(
    as_user, operator, gobrave_config
):
    gobrave_config(container={"allowed_volume_roots": ["/srv"]})
    form = _rows(
        [("MODE", "debug"), ("HOME", "$WORKSPACE_PATH")],
        [("$WORKSPACE_PATH", "/work", "rw"), ("/srv/data", "/data", "ro")],
    )
    response = as_user(operator).post(reverse("admin:containers_containertemplate_add"), form)
    assert response.status_code == 302, response.context["adminform"].form.errors
    template = ContainerTemplate.objects.get(name="web")
    assert template.env == {"MODE": "debug", "HOME": "$WORKSPACE_PATH"}
    assert template.volumes == [
        {"source": "$WORKSPACE_PATH", "target": "/work", "read_only": False},
        {"source": "/srv/data", "target": "/data", "read_only": True},
    ]
    root = make_user("root", superuser=True)  # sees env values and host paths unredacted
    html = (
        as_user(root)
        .get(reverse("admin:containers_containertemplate_change", args=[template.pk]))
        .content.decode()
    )
    drawn = zip(_cells(html, "env-name"), _cells(html, "env-value"), strict=True)
    assert sorted(pair for pair in drawn if pair != ("", "")) == [
        ("HOME", "$WORKSPACE_PATH"),
        ("MODE", "debug"),
    ]  # (jsonb keeps its own key order)
    assert _cells(html, "volumes-source")[:2] == ["$WORKSPACE_PATH", "/srv/data"]
    assert '<option value="ro" selected>' in html
    assert "containers/rows.js" in html  # served from the app's static files, no CDN


@pytest.mark.parametrize(
    "env, volumes, field, says",
    [
        ([("1BAD", "x")], [], "env", "env: '1BAD' is not a valid variable name"),
        ([("", "orphan value")], [], "env", "Row 1: a value needs a name."),
        ([("A", "1"), ("A", "2")], [], "env", "Row 2: A is set twice."),
        ([], [("/srv/data", "", "rw")], "volumes", "Row 1: the target is missing."),
        ([], [("/srv/data", "/d", "rx")], "volumes", "Row 1: the mode is rw or ro."),
        ([], [("/etc", "/e", "rw")], "volumes", "/etc is outside the allowed volume roots"),
        (
            [],
            [("/etc/$OWNER_ID", "/e", "rw")],
            "volumes",
            "/etc/$OWNER_ID is outside the allowed volume roots (/srv), whatever its variables",
        ),
        (
            [],
            [("/srv/$INSTANCE_NAME", "/e", "rw")],
            "volumes",
            "$INSTANCE_NAME is chosen by the user",
        ),
    ],
)
def test_a_bad_row_is_refused_on_its_field_and_changes_nothing(
    as_user, operator, gobrave_config, env, volumes, field, says
):
    gobrave_config(container={"allowed_volume_roots": ["/srv"]})
    template = TemplateFactory(name="kept", env={"KEEP": "1"}, volumes=[])
    form = {**_rows(env, volumes), "name": "kept"}
    response = as_user(operator).post(
        reverse("admin:containers_containertemplate_change", args=[template.pk]), form
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field] and says in errors[field][0], errors
    template.refresh_from_db()
    assert (template.env, template.volumes) == ({"KEEP": "1"}, [])
    html = response.content.decode()  # what was typed is drawn again, to be corrected
    typed = [cell for row in (env or volumes) for cell in row[:2] if cell]
    assert all(f'value="{cell}"' in html for cell in typed)


def test_the_change_page_says_which_user_env_rules_an_upgrade_removed_until_saved(
    as_user, operator
):
    template = TemplateFactory(
        name="kept",
        user_env=["MODE"],
        user_env_removed=[{"rule": "*", "reason": "user_env[0].name: '*' would let users..."}],
    )
    url = reverse("admin:containers_containertemplate_change", args=[template.pk])
    shown = _messages(as_user(operator).get(url))
    assert any("removed from user_env" in m and "'*'" in m for m in shown), shown
    response = as_user(operator).post(
        url, {**_rows([], []), "name": "kept", "user_env": '["MODE"]'}
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    template.refresh_from_db()
    assert (template.user_env, template.user_env_removed) == (["MODE"], []), template.__dict__
    shown = _messages(as_user(operator).get(url))
    assert not any("removed from user_env" in m for m in shown), shown


def test_saving_a_never_pull_template_whose_image_is_missing_warns(as_user, operator, fake_runtime):
    _missing_on(fake_runtime, "not-here:1")
    response = as_user(operator).post(
        reverse("admin:containers_containertemplate_add"), {**VALID, "image": "not-here:1"}
    )
    assert response.status_code == 302
    assert any("missing" in m and "pull policy is never" in m for m in _messages(response))
    assert ContainerTemplate.objects.get(name="web").image_status == "missing"


def test_refresh_image_status_action_asks_now(as_user, operator, fake_runtime):
    _missing_on(fake_runtime, "not-here:1")
    template = TemplateFactory(name="t1", image="not-here:1", constraints={"engine": "fake"})
    response = as_user(operator).post(
        reverse("admin:containers_containertemplate_changelist"),
        {"action": "refresh_image_status", "_selected_action": [str(template.pk)]},
    )
    assert _messages(response) == ["Image status — missing: t1."]
    template.refresh_from_db()
    assert template.image_status == "missing" and template.image_checked_at is not None


def test_template_changelist_shows_the_image_status(as_user, operator):
    TemplateFactory(name="gone", image_status="missing")
    response = as_user(operator).get(reverse("admin:containers_containertemplate_changelist"))
    content = response.content.decode()
    assert "missing" in content and "gb-badge" in content


# --- runtimes -------------------------------------------------------------------------------


def _engine_calls(monkeypatch) -> list[str]:
    """Record every engine object asked for (the changelist must ask for none)."""
    import containers.engines
    import containers.engines.calls

    asked: list[str] = []
    real = containers.engines.engine_for

    def spy(runtime):
        asked.append(runtime.name)
        return real(runtime)

    monkeypatch.setattr(containers.engines, "engine_for", spy)
    monkeypatch.setattr(containers.engines.calls, "engine_for", spy)
    return asked


def test_runtime_changelist_shows_the_cached_health_and_asks_no_engine(
    as_user, operator, monkeypatch
):
    fine = RuntimeFactory(name="fine")  # fake: always answers
    dead = RuntimeFactory(name="dead", driver="docker", base_url="unix:///nonexistent/d.sock")
    RuntimeFactory(name="new")
    runtime_health_record(runtime_id=fine.pk, reachable=True)
    runtime_health_record(runtime_id=dead.pk, reachable=False, error="connection refused")
    asked = _engine_calls(monkeypatch)
    response = as_user(operator).get(reverse("admin:containers_runtime_changelist"))
    content = response.content.decode()
    assert response.status_code == 200
    assert asked == []
    assert content.count(">answers<") == 1, content
    assert ">no answer since " in content and "connection refused" in content, content
    assert ">not checked yet<" in content


def test_runtime_page_checks_its_engine_and_records_it(as_user, operator, monkeypatch):
    dead = RuntimeFactory(name="dead", driver="docker", base_url="unix:///nonexistent/d.sock")
    fine = RuntimeFactory(name="fine")
    asked = _engine_calls(monkeypatch)
    client = as_user(operator)
    for runtime in (dead, fine):
        page = client.get(reverse("admin:containers_runtime_change", args=[runtime.pk]))
        assert page.status_code == 200
    assert asked == ["dead", "fine"]
    dead.refresh_from_db()
    fine.refresh_from_db()
    assert (dead.health, fine.health) == ("unreachable", "reachable"), (
        dead.last_error,
        fine.last_error,
    )
    assert dead.last_error and dead.health_checked_at and dead.health_since
    assert fine.last_seen_at and not fine.last_error
    assert (
        ">no answer since "
        in client.get(reverse("admin:containers_runtime_change", args=[dead.pk])).content.decode()
    )


# --- outbox ---------------------------------------------------------------------------------


def _row(status=OutboxStatus.PENDING, *, due_in=0, **fields) -> OutboxEvent:
    return OutboxEvent.objects.create(
        kind=fields.pop("kind", "ContainerStartRequest"),
        queue="create",
        aggregate_id=fields.pop("aggregate_id", "00000000-0000-0000-0000-000000000001"),
        status=status,
        available_at=timezone.now() + dt.timedelta(seconds=due_in),
        **fields,
    )


def test_retry_now_makes_backed_off_rows_due_and_refuses_the_others(as_user, operator):
    waiting = _row(due_in=600, attempts=3, last_error="boom")
    due = _row(due_in=-1)
    dead = _row(OutboxStatus.DEAD, last_error="gave up")
    response = as_user(operator).post(
        reverse("admin:outbox_outboxevent_changelist"),
        {"action": "retry_now", "_selected_action": [waiting.pk, due.pk, dead.pk]},
    )
    messages = _messages(response)
    assert f"#{waiting.pk}: due now" in messages
    assert f"#{due.pk}: already due" in messages
    assert any(m.startswith(f"#{dead.pk}: refused: it is dead") for m in messages)
    waiting.refresh_from_db()
    assert waiting.available_at <= timezone.now()
    assert waiting.attempts == 3
    dead.refresh_from_db()
    assert dead.status == OutboxStatus.DEAD


def test_dead_row_is_read_only_with_its_reason_and_a_history_link(as_user, operator):
    instance = InstanceFactory()
    dead = _row(
        OutboxStatus.DEAD,
        aggregate_id=str(instance.pk),
        last_error="Traceback...\nPermanentEngineError: image missing",
        payload={"by": "api:alice"},
    )
    client = as_user(operator)
    url = reverse("admin:outbox_outboxevent_change", args=[dead.pk])
    page = client.get(url)
    content = page.content.decode()
    assert page.status_code == 200
    assert "PermanentEngineError: image missing" in content
    assert f"?instance_id={instance.pk}" in content
    assert "<textarea" not in content and 'name="_save"' not in content
    client.post(url, {"status": "pending", "payload": "{}"})
    dead.refresh_from_db()
    assert (dead.status, dead.payload) == (OutboxStatus.DEAD, {"by": "api:alice"})


def test_outbox_filters_by_status_and_kind(as_user, operator):
    wanted = _row(OutboxStatus.DEAD, kind="ContainerCreateRequest")
    _row(OutboxStatus.DEAD, kind="ContainerStopRequest")
    _row(OutboxStatus.PENDING, kind="ContainerCreateRequest")
    response = as_user(operator).get(
        reverse("admin:outbox_outboxevent_changelist"),
        {"status__exact": "dead", "kind": "ContainerCreateRequest"},
    )
    assert list(response.context["cl"].result_list) == [wanted]


# --- audit log ------------------------------------------------------------------------------


def _event(**fields) -> ContainerEvent:
    defaults = {
        "instance_id": "00000000-0000-0000-0000-0000000000aa",
        "instance_name": "web-1",
        "kind": "transition",
        "actor": "worker",
    }
    return ContainerEvent.objects.create(**{**defaults, **fields})


def test_events_are_read_only(as_user, superuser):
    event = _event(message="kept")
    client = as_user(superuser)
    assert client.get(reverse("admin:containers_containerevent_add")).status_code == 403
    url = reverse("admin:containers_containerevent_change", args=[event.pk])
    client.post(url, {"message": "rewritten"})
    event.refresh_from_db()
    assert event.message == "kept"


def test_events_filter_by_kind_actor_and_date(as_user, viewer):
    old = _event(kind="runtime", actor="monitor")
    ContainerEvent.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - dt.timedelta(days=40)
    )
    new = _event(kind="runtime", actor="monitor")
    _event(kind="ContainerStopRequest", actor="admin:root")
    client = as_user(viewer)
    url = reverse("admin:containers_containerevent_changelist")
    response = client.get(url, {"kind": "runtime", "actor": "monitor"})
    assert set(response.context["cl"].result_list) == {old, new}
    since = str(timezone.now() - dt.timedelta(days=7))  # as DateFieldListFilter writes it
    response = client.get(url, {"kind": "runtime", "actor": "monitor", "created_at__gte": since})
    assert list(response.context["cl"].result_list) == [new]


def test_events_export_as_csv(as_user, viewer):
    first = _event(kind="ContainerCreateRequest", to_status="pending", message='a, quoted "x"')
    second = _event(kind="transition", from_status="pending", to_status="creating")
    response = as_user(viewer).post(
        reverse("admin:containers_containerevent_changelist"),
        {"action": "export_csv", "_selected_action": [first.pk, second.pk]},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    body = b"".join(response.streaming_content).decode()
    rows = list(csv.reader(io.StringIO(body)))
    assert rows[0][:4] == ["created_at", "instance_id", "instance_name", "kind"]
    assert [r[3] for r in rows[1:]] == ["ContainerCreateRequest", "transition"]
    assert rows[1][7] == 'a, quoted "x"'


def test_events_of_one_instance_by_link(as_user, viewer):
    mine = _event(instance_id="00000000-0000-0000-0000-0000000000bb")
    _event()
    response = as_user(viewer).get(
        reverse("admin:containers_containerevent_changelist"), {"instance_id": mine.instance_id}
    )
    assert list(response.context["cl"].result_list) == [mine]


# --- orphans --------------------------------------------------------------------------------


def test_orphans_are_listed(as_user, viewer):
    runtime = RuntimeFactory()
    OrphanContainer.objects.create(runtime=runtime, container_id="c0ffee", name="gb-stray")
    response = as_user(viewer).get(reverse("admin:containers_orphancontainer_changelist"))
    assert "gb-stray" in response.content.decode()


@pytest.mark.parametrize(
    "url_name",
    ["admin:containers_containerevent_changelist", "admin:outbox_outboxevent_changelist"],
)
def test_search_with_any_text_never_fails(as_user, viewer, url_name):
    _event()
    for term in ("not-a-uuid", "00000000-0000-0000-0000-0000000000aa", "'; --", "%"):
        assert as_user(viewer).get(reverse(url_name), {"q": term}).status_code == 200


def test_an_instance_page_shows_its_engine_unreachable_since_when(as_user, operator, monkeypatch):
    dead = RuntimeFactory(name="dead", driver="docker", base_url="unix:///nonexistent/d.sock")
    instance = InstanceFactory(runtime=dead)
    runtime_health_record(runtime_id=dead.pk, reachable=False, error="connection timed out")
    since = Runtime.objects.get(pk=dead.pk).health_since
    asked = _engine_calls(monkeypatch)
    page = as_user(operator).get(
        reverse("admin:containers_containerinstance_change", args=[instance.pk])
    )
    content = page.content.decode()
    assert page.status_code == 200, content[:2000]
    assert asked == []
    assert f">no answer since {since:%Y-%m-%d %H:%M:%S}<" in content, content
