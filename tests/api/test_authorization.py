"""The authorization matrix: every endpoint for anonymous, owner, another user and staff.

Anonymous requests are 401 everywhere. A user acts on their own instances only (another
user's instance answers 404, as a missing one); templates are read by all and written by
staff; runtimes and the outbox are staff only. Every row of ``MATRIX`` runs on a fresh
database with alice's instance in ``stopped`` (so start, stop and delete are all accepted).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from outbox.models import OutboxEvent
from tests.api.helpers import assert_error
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db

TEMPLATE = {"name": "web", "image": "nginx", "constraints": {"engine": "fake"}}

# (method, path, body, (owner, other, staff) expected status); anonymous is always 401.
MATRIX = [
    ("get", "/api/containers/", None, (200, 200, 200)),
    ("post", "/api/containers/", {"template": "sleeper"}, (202, 202, 202)),
    ("get", "/api/containers/{instance}/", None, (200, 404, 200)),
    ("post", "/api/containers/{instance}/start/", None, (202, 404, 202)),
    ("post", "/api/containers/{instance}/stop/", None, (202, 404, 202)),
    ("delete", "/api/containers/{instance}/", None, (202, 404, 202)),
    ("get", "/api/containers/{instance}/events/", None, (200, 404, 200)),
    ("get", "/api/containers/{instance}/logs/", None, (200, 404, 200)),
    ("get", "/api/templates/", None, (200, 200, 200)),
    ("get", "/api/templates/{template}/", None, (200, 200, 200)),
    ("post", "/api/templates/", TEMPLATE, (403, 403, 201)),
    ("put", "/api/templates/{template}/", TEMPLATE, (403, 403, 200)),
    ("patch", "/api/templates/{template}/", {"image": "x"}, (403, 403, 200)),
    ("delete", "/api/templates/{spare}/", None, (403, 403, 204)),
    ("get", "/api/runtimes/", None, (403, 403, 200)),
    ("get", "/api/runtimes/{runtime}/", None, (403, 403, 200)),
    ("get", "/api/outbox/", None, (403, 403, 200)),
    ("get", "/api/outbox/{row}/", None, (403, 403, 200)),
    ("post", "/api/outbox/{row}/retry/", None, (403, 403, 200)),
    ("get", "/api/queue/", None, (200, 200, 200)),
]  # fmt: skip
ROLES = ["anonymous", "owner", "other", "staff"]
ERROR_CODES = {401: "not_authenticated", 403: "permission_denied", 404: "not_found"}


@pytest.fixture
def objects(make_instance, template, fake_runtime):
    row = OutboxEvent.objects.create(
        kind="ContainerStopRequest", queue="control", aggregate_id="x", available_at=timezone.now()
    )
    return {
        "instance": make_instance("stopped").pk,
        "template": template.pk,
        "spare": TemplateFactory(name="spare").pk,
        "runtime": fake_runtime.pk,
        "row": row.pk,
    }


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    "method, path, body, expected", MATRIX, ids=[f"{m} {p}" for m, p, _, _ in MATRIX]
)
def test_authorization_matrix(clients, objects, role, method, path, body, expected):
    client = clients[role]
    status = 401 if role == "anonymous" else expected[ROLES.index(role) - 1]
    kwargs = {"format": "json"} if body is not None else {}
    response = getattr(client, method)(path.format(**objects), body, **kwargs)
    if status >= 400:
        assert_error(response, status, ERROR_CODES[status])
        if status == 401:
            assert response["WWW-Authenticate"] == "Token"
    else:
        assert response.status_code == status, response.content


def test_list_shows_another_user_nothing_of_alices(mallory, staff, make_instance):
    instance = make_instance()
    assert mallory.get("/api/containers/").json()["count"] == 0
    assert mallory.get(f"/api/containers/?owner={instance.owner.username}").json()["count"] == 0
    assert staff.get("/api/containers/").json()["count"] == 1


def test_another_users_refused_request_changes_nothing(mallory, make_instance):
    instance = make_instance("running")
    assert_error(mallory.post(f"/api/containers/{instance.pk}/stop/"), 404, "not_found")
    instance.refresh_from_db()
    assert instance.status == "running"
    assert OutboxEvent.objects.count() == 0


def test_staff_acts_on_anyones_instance_and_is_the_actor(staff, make_instance):
    instance = make_instance("running")
    response = staff.post(f"/api/containers/{instance.pk}/stop/")
    assert response.status_code == 202
    assert OutboxEvent.objects.get().payload == {"by": "root"}


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/", "/metrics"])
def test_schema_docs_and_metrics_are_public(anon, path):
    assert anon.get(path).status_code == 200
