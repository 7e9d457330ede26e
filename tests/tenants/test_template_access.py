"""Templates limited to groups and switched off: users list and use only theirs; any other
answers as if it did not exist. Holders of view_containertemplate see them all."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from containers.errors import TemplateUnavailable
from containers.models import ContainerInstance
from containers.requests.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.api.helpers import assert_error
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab():
    return Group.objects.create(name="lab")


@pytest.fixture
def templates(fake_runtime, lab):
    open_ = TemplateFactory(name="open")
    limited = TemplateFactory(name="limited")
    limited.allowed_groups.add(lab)
    off = TemplateFactory(name="off", enabled=False)
    return {"open": open_, "limited": limited, "off": off}


def _names(client):
    return [row["name"] for row in client.get("/api/templates/").json()["results"]]


def test_a_user_lists_only_the_enabled_templates_open_to_them(callers, templates, lab):
    alice = callers["user"]
    assert _names(alice.api) == ["open"]
    alice.user.groups.add(lab)
    assert _names(alice.api) == ["limited", "open"]


@pytest.mark.parametrize("name", ["limited", "off"])
def test_a_template_not_open_to_the_user_answers_as_missing(callers, templates, name):
    alice = callers["user"].api
    assert_error(alice.get(f"/api/templates/{templates[name].pk}/"), 404, "not_found")
    missing = assert_error(
        alice.post("/api/containers/", {"template": "nope"}, format="json"), 400, "invalid"
    )
    refused = assert_error(
        alice.post("/api/containers/", {"template": name}, format="json"), 400, "invalid"
    )
    assert refused["details"] == {"template": [f"no template {name!r} that you may use"]}
    assert missing["details"] == {"template": ["no template 'nope' that you may use"]}
    assert not ContainerInstance.objects.exists() and not OutboxEvent.objects.exists()


def test_a_member_of_the_group_uses_the_limited_template(callers, templates, lab):
    alice = callers["user"]
    alice.user.groups.add(lab)
    response = alice.api.post("/api/containers/", {"template": "limited"}, format="json")
    assert response.status_code == 202, response.content


@pytest.mark.parametrize("role", ["viewer", "operator", "superuser"])
def test_view_permission_shows_every_template(callers, templates, role):
    body = callers[role].api.get("/api/templates/").json()["results"]
    assert {row["name"]: (row["enabled"], row["allowed_groups"]) for row in body} == {
        "limited": (True, ["lab"]),
        "off": (False, []),
        "open": (True, []),
    }


def test_seeing_a_limited_template_does_not_make_it_usable(callers, templates):
    response = callers["viewer"].api.post(
        "/api/containers/", {"template": "limited"}, format="json"
    )
    assert_error(response, 400, "invalid")


def test_nobody_creates_from_a_switched_off_template_not_even_the_admin(callers, templates, owner):
    with pytest.raises(TemplateUnavailable) as refused:
        container_create_by_template(template=templates["off"], owner=owner, actor="admin:root")
    assert refused.value.details == {"field": "template"}
    assert not ContainerInstance.objects.exists()


def test_the_create_service_refuses_an_owner_outside_the_groups(callers, templates, owner):
    with pytest.raises(TemplateUnavailable, match="not open to alice"):
        container_create_by_template(template=templates["limited"], owner=owner, actor="cli")


def test_an_operator_limits_and_switches_off_a_template_through_the_api(callers, templates):
    operator, alice = callers["operator"].api, callers["user"].api
    url = f"/api/templates/{templates['open'].pk}/"
    response = operator.patch(url, {"allowed_groups": ["lab"]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["allowed_groups"] == ["lab"]
    assert _names(alice) == []
    operator.patch(url, {"allowed_groups": [], "enabled": False}, format="json")
    assert _names(alice) == []
    operator.patch(url, {"enabled": True}, format="json")
    assert _names(alice) == ["open"]


def test_an_unknown_group_is_refused_by_name_and_changes_nothing(callers, templates):
    url = f"/api/templates/{templates['open'].pk}/"
    error = assert_error(
        callers["operator"].api.patch(url, {"allowed_groups": ["ghosts"]}, format="json"),
        400,
        "invalid_spec",
    )
    assert "ghosts" in error["message"]
    assert not templates["open"].allowed_groups.exists()


def test_a_template_read_for_a_user_is_usable_by_that_user_without_asking_again(
    callers, templates, lab, django_assert_num_queries
):
    """``template_get`` reads through the usable rule for the user: that object answers
    for that user (no second query), and for nobody else; a template read any other
    way asks the database, which sees the group taken away meanwhile."""
    from containers.access import may_use_template
    from containers.models import ContainerTemplate
    from containers.selectors import template_get

    alice, mallory = callers["user"].user, callers["other"].user
    alice.groups.add(lab)
    read = template_get(ref="limited", user=alice)
    with django_assert_num_queries(0):
        assert may_use_template(alice, read)
    with django_assert_num_queries(1):
        assert not may_use_template(mallory, read)
    alice.groups.remove(lab)
    again = ContainerTemplate.objects.get(pk=read.pk)
    with django_assert_num_queries(1):
        assert not may_use_template(alice, again)
    with pytest.raises(TemplateUnavailable):
        container_create_by_template(template=again, owner=alice, actor="cli")
    assert not ContainerInstance.objects.exists()
