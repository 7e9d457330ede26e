"""The permission matrix: every API endpoint and method, every admin page and action, for
anonymous, a user, another user, staff without permissions, a viewer, an operator and a
superuser. Every cell's exact status is asserted, allowed ones included.

One database for the whole table: each cell runs inside a savepoint that is rolled back,
so every caller meets the same objects (alice's stopped instance, a pending outbox row,
an open template, a template limited to a group, a spare template to delete).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from containers.models import ContainerInstance
from outbox.models import OutboxEvent
from tenants.models import ApiToken
from tests.api.helpers import assert_error
from tests.factories import InstanceFactory, RuntimeFactory, TemplateFactory, api_token
from tests.tenants.conftest import ROLES

pytestmark = pytest.mark.django_db

TEMPLATE = {"name": "web", "image": "nginx", "constraints": {"engine": "fake"}}
DAG = {"name": "solo", "nodes": [{"key": "a", "template": "sleeper"}]}
RUNTIME = {"name": "matrix-engine", "base_url": "unix:///var/run/docker.sock"}
LABELS = {"labels": {"m": "1"}}
ERROR_CODES = {
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
}


@pytest.fixture
def objects(callers, tmp_path):
    runtime = RuntimeFactory(name="fake", base_url=f"fake://{tmp_path / 'engine'}")
    open_template = TemplateFactory(name="sleeper")
    limited = TemplateFactory(name="limited")
    limited.allowed_groups.add(Group.objects.create(name="lab"))
    instance = InstanceFactory(
        owner=callers["user"].user, template=open_template, runtime=runtime, status="stopped"
    )
    row = OutboxEvent.objects.create(
        kind="ContainerStopRequest",
        queue="control",
        aggregate_id="x",
        available_at=timezone.now() + timezone.timedelta(hours=1),
    )
    from dags.services import dag_run_start, dag_template_save

    dag = dag_template_save(name="pair", nodes=[{"key": "a", "template": "sleeper"}])
    run = dag_run_start(dag=dag, owner=callers["user"].user, actor="t")
    return {
        "dag": dag.pk,
        "run": run.pk,
        "instance": instance.pk,
        "template": open_template.pk,
        "limited": limited.pk,
        "spare": TemplateFactory(name="spare").pk,
        "runtime": runtime.pk,
        "row": row.pk,
        "event": 0,
        "token": _token_of(callers["user"].user),
    }


def _token_of(user) -> int:
    api_token(user, name="matrix")
    return ApiToken.objects.get(user=user, name="matrix").pk


def _cell(send):
    """Run one request in a savepoint that is rolled back; return the response."""
    with transaction.atomic():
        response = send()
        transaction.set_rollback(True)
    return response


def _walk(callers, send):
    return {role: _cell(lambda role=role: send(callers[role])) for role in ROLES}


# --- the API --------------------------------------------------------------------------------

# (method, path, body): expected status for
#  anonymous, user, other, staff (no permissions), viewer, operator, superuser
API = [
    ("get", "/api/", None,                              (200, 200, 200, 200, 200, 200, 200)),
    ("get", "/api/containers/", None,                   (401, 200, 200, 200, 200, 200, 200)),
    ("post", "/api/containers/", {"template": "sleeper"}, (401, 202, 202, 202, 202, 202, 202)),
    ("post", "/api/containers/", {"template": "limited"}, (401, 400, 400, 400, 400, 400, 202)),
    ("get", "/api/containers/{instance}/", None,        (401, 200, 404, 404, 200, 200, 200)),
    ("post", "/api/containers/{instance}/start/", None, (401, 202, 404, 404, 403, 202, 202)),
    ("post", "/api/containers/{instance}/stop/", None,  (401, 202, 404, 404, 403, 202, 202)),
    ("delete", "/api/containers/{instance}/", None,     (401, 202, 404, 404, 403, 202, 202)),
    ("get", "/api/containers/{instance}/events/", None, (401, 200, 404, 404, 200, 200, 200)),
    ("get", "/api/containers/{instance}/logs/", None,   (401, 200, 404, 404, 200, 200, 200)),
    ("get", "/api/templates/", None,                    (401, 200, 200, 200, 200, 200, 200)),
    ("get", "/api/templates/{template}/", None,         (401, 200, 200, 200, 200, 200, 200)),
    ("get", "/api/templates/{limited}/", None,          (401, 404, 404, 404, 200, 200, 200)),
    ("post", "/api/templates/", TEMPLATE,               (401, 403, 403, 403, 403, 201, 201)),
    ("put", "/api/templates/{template}/", TEMPLATE,     (401, 403, 403, 403, 403, 200, 200)),
    ("patch", "/api/templates/{template}/", {"image": "x"}, (401, 403, 403, 403, 403, 200, 200)),
    ("delete", "/api/templates/{spare}/", None,         (401, 403, 403, 403, 403, 204, 204)),
    ("get", "/api/runtimes/", None,                     (401, 403, 403, 403, 200, 200, 200)),
    ("get", "/api/runtimes/{runtime}/", None,           (401, 403, 403, 403, 200, 200, 200)),
    ("post", "/api/runtimes/", RUNTIME,                 (401, 403, 403, 403, 403, 403, 201)),
    ("patch", "/api/runtimes/{runtime}/", LABELS,       (401, 403, 403, 403, 403, 200, 200)),
    ("get", "/api/outbox/", None,                       (401, 403, 403, 403, 200, 200, 200)),
    ("get", "/api/outbox/{row}/", None,                 (401, 403, 403, 403, 200, 200, 200)),
    ("post", "/api/outbox/{row}/retry/", None,          (401, 403, 403, 403, 403, 200, 200)),
    ("get", "/api/dag-templates/", None,                (401, 200, 200, 200, 200, 200, 200)),
    ("get", "/api/dag-templates/{dag}/", None,          (401, 200, 200, 200, 200, 200, 200)),
    ("post", "/api/dag-templates/", DAG,                (401, 403, 403, 403, 403, 201, 201)),
    ("delete", "/api/dag-templates/{dag}/", None,       (401, 403, 403, 403, 403, 204, 204)),
    ("get", "/api/dag-runs/", None,                     (401, 200, 200, 200, 200, 200, 200)),
    ("post", "/api/dag-runs/", {"template": "pair"},    (401, 202, 202, 202, 202, 202, 202)),
    ("get", "/api/dag-runs/{run}/", None,               (401, 200, 404, 404, 200, 200, 200)),
    ("post", "/api/dag-runs/{run}/cancel/", None,       (401, 202, 404, 404, 403, 202, 202)),
    ("post", "/api/dag-runs/{run}/retry-failed/", None, (401, 409, 404, 404, 403, 409, 409)),
    ("get", "/api/queue/", None,                        (401, 200, 200, 200, 200, 200, 200)),
    ("get", "/api/schema/", None,                       (401, 200, 200, 200, 200, 200, 200)),
    # Everyone's own tokens only: alice's is a 404 to anyone else, the superuser included.
    ("get", "/api/tokens/", None,                       (401, 200, 200, 200, 200, 200, 200)),
    ("post", "/api/tokens/", {"name": "new"},           (401, 201, 201, 201, 201, 201, 201)),
    ("delete", "/api/tokens/{token}/", None,            (401, 204, 404, 404, 404, 404, 404)),
    # Methods an endpoint does not have: 405 once the caller is known.
    ("patch", "/api/containers/{instance}/", {"name": "x"}, (401, 405, 405, 405, 405, 405, 405)),
    ("put", "/api/runtimes/{runtime}/", {"name": "x"},  (401, 405, 405, 405, 405, 405, 405)),
    ("delete", "/api/outbox/{row}/", None,              (401, 405, 405, 405, 405, 405, 405)),
    ("post", "/api/queue/", None,                       (401, 405, 405, 405, 405, 405, 405)),
    ("patch", "/api/tokens/{token}/", {"name": "x"},    (401, 405, 405, 405, 405, 405, 405)),
    ("get", "/api/tokens/{token}/", None,               (401, 405, 405, 405, 405, 405, 405)),
]  # fmt: skip


@pytest.mark.parametrize(
    "method, path, body, expected", API, ids=[f"{m} {p} {b or ''}" for m, p, b, _ in API]
)
def test_api_cell(callers, objects, method, path, body, expected):
    url = path.format(**objects)
    kwargs = {"format": "json"} if body is not None else {}
    responses = _walk(callers, lambda c: getattr(c.api, method)(url, body, **kwargs))
    got = {role: r.status_code for role, r in responses.items()}
    assert got == dict(zip(ROLES, expected, strict=True)), {
        role: r.content[:200] for role, r in responses.items() if got[role] != 0
    }
    for response in responses.values():
        # The schema renders its own refusals in its negotiated format (YAML by default).
        if response.status_code in ERROR_CODES and "json" in response["Content-Type"]:
            assert_error(response, response.status_code, ERROR_CODES[response.status_code])
            if response.status_code == 401:
                assert response["WWW-Authenticate"] == "Token"


def test_refused_api_requests_change_nothing(callers, objects):
    """The 403/404 cells above leave the instance and the outbox as they were."""
    instance = ContainerInstance.objects.get(pk=objects["instance"])
    for role in ("other", "staff", "viewer"):
        for verb in ("start", "stop"):
            callers[role].api.post(f"/api/containers/{instance.pk}/{verb}/")
        callers[role].api.delete(f"/api/containers/{instance.pk}/")
    instance.refresh_from_db()
    assert instance.status == "stopped"
    assert OutboxEvent.objects.exclude(kind="DagRunAdvance").count() == 1


# --- the admin ------------------------------------------------------------------------------

L = LOGIN = 302  # anonymous and non-staff are sent to the login page

# (admin url name, args): expected status for the same seven callers
PAGES = [
    ("index", (), (L, L, L, 200, 200, 200, 200)),
    ("containers_dashboard", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_containerinstance_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_containerinstance_add", (), (L, L, L, 403, 403, 403, 200)),
    ("containers_containerinstance_change", ("instance",), (L, L, L, 403, 200, 200, 200)),
    ("containers_containerinstance_delete", ("instance",), (L, L, L, 403, 403, 403, 403)),
    ("containers_containertemplate_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_containertemplate_add", (), (L, L, L, 403, 403, 200, 200)),
    ("containers_containertemplate_change", ("template",), (L, L, L, 403, 200, 200, 200)),
    ("containers_containertemplate_delete", ("spare",), (L, L, L, 403, 403, 200, 200)),
    ("containers_runtime_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_runtime_add", (), (L, L, L, 403, 403, 403, 200)),
    ("containers_runtime_change", ("runtime",), (L, L, L, 403, 200, 200, 200)),
    ("containers_containerevent_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_runtimeevent_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_orphancontainer_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("containers_workspace_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("outbox_outboxevent_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("outbox_outboxevent_change", ("row",), (L, L, L, 403, 200, 200, 200)),
    ("tenants_userquota_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("tenants_userquota_add", (), (L, L, L, 403, 403, 200, 200)),
    ("tenants_groupquota_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("tenants_groupquota_add", (), (L, L, L, 403, 403, 200, 200)),
    ("dags_dagtemplate_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("dags_dagtemplate_add", (), (L, L, L, 403, 403, 200, 200)),
    ("dags_dagtemplate_change", ("dag",), (L, L, L, 403, 200, 200, 200)),
    ("dags_dagtemplate_delete", ("dag",), (L, L, L, 403, 403, 200, 200)),
    ("dags_dagrun_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("dags_dagrun_add", (), (L, L, L, 403, 403, 403, 403)),
    ("dags_dagrun_change", ("run",), (L, L, L, 403, 200, 200, 200)),
    ("dags_dagevent_changelist", (), (L, L, L, 403, 200, 200, 200)),
    ("auth_user_changelist", (), (L, L, L, 403, 403, 403, 200)),
    ("auth_group_changelist", (), (L, L, L, 403, 403, 403, 200)),
    ("tenants_apitoken_changelist", (), (L, L, L, 403, 403, 403, 200)),
    ("tenants_apitoken_change", ("token",), (L, L, L, 403, 403, 403, 200)),
    ("tenants_apitoken_add", (), (L, L, L, 403, 403, 403, 403)),
    ("tenants_apitoken_delete", ("token",), (L, L, L, 403, 403, 403, 200)),
]  # fmt: skip


@pytest.mark.parametrize("name, args, expected", PAGES, ids=[p[0] for p in PAGES])
def test_admin_page_cell(callers, objects, name, args, expected):
    url = reverse(f"admin:{name}", args=[objects[a] for a in args])
    responses = _walk(callers, lambda c: c.web.get(url))
    got = {role: r.status_code for role, r in responses.items()}
    assert got == dict(zip(ROLES, expected, strict=True))
    for role in ("anonymous", "user", "other"):
        assert responses[role]["Location"].startswith(reverse("admin:login")), role


# (changelist, action, the object it acts on): status and whether the object changed,
# for the same seven callers. An action the caller may not run is not offered: the
# changelist is shown again (200) and nothing runs.
ACTIONS = [
    ("containers_containerinstance", "stop_instances", "running",
     (LOGIN, LOGIN, LOGIN, 403, 200, 302, 302), (0, 0, 0, 0, 0, 1, 1)),
    ("containers_containerinstance", "start_instances", "stopped",
     (LOGIN, LOGIN, LOGIN, 403, 200, 302, 302), (0, 0, 0, 0, 0, 1, 1)),
    ("containers_containerinstance", "delete_instances", "stopped",
     (LOGIN, LOGIN, LOGIN, 403, 200, 302, 302), (0, 0, 0, 0, 0, 1, 1)),
    ("outbox_outboxevent", "retry_now", "row",
     (LOGIN, LOGIN, LOGIN, 403, 200, 302, 302), (0, 0, 0, 0, 0, 1, 1)),
    ("dags_dagrun", "cancel_runs", "run",
     (LOGIN, LOGIN, LOGIN, 403, 200, 302, 302), (0, 0, 0, 0, 0, 1, 1)),
    ("containers_containerevent", "export_csv", "event",
     (LOGIN, LOGIN, LOGIN, 403, 200, 200, 200), (0, 0, 0, 0, 0, 0, 0)),
]  # fmt: skip


def _target(kind: str, callers, objects):
    """The object an action acts on, and a function telling whether it changed."""
    if kind == "row":
        row = OutboxEvent.objects.get(pk=objects["row"])
        return row.pk, lambda: OutboxEvent.objects.get(pk=row.pk).available_at != row.available_at
    if kind == "run":
        from dags.models import DagRun

        run = DagRun.objects.get(pk=objects["run"])
        return run.pk, lambda: DagRun.objects.get(pk=run.pk).status != run.status
    if kind == "event":
        from containers.models import ContainerEvent

        event = ContainerEvent.objects.create(instance_id=objects["instance"], instance_name="x")
        return event.pk, lambda: False
    instance = ContainerInstance.objects.get(pk=objects["instance"])
    ContainerInstance.objects.filter(pk=instance.pk).update(status=kind)
    return instance.pk, lambda: ContainerInstance.objects.get(pk=instance.pk).status != kind


@pytest.mark.parametrize(
    "changelist, action, kind, expected, changed", ACTIONS, ids=[a[1] for a in ACTIONS]
)
def test_admin_action_cell(callers, objects, changelist, action, kind, expected, changed):
    url = reverse(f"admin:{changelist}_changelist")
    got, moved = {}, {}
    for role in ROLES:
        with transaction.atomic():
            pk, did_change = _target(kind, callers, objects)
            # confirm: the delete action's "yes" (it asks first); the others ignore it.
            response = callers[role].web.post(
                url, {"action": action, "_selected_action": [str(pk)], "confirm": "yes"}
            )
            got[role], moved[role] = response.status_code, int(did_change())
            transaction.set_rollback(True)
    assert got == dict(zip(ROLES, expected, strict=True))
    assert moved == dict(zip(ROLES, changed, strict=True))
