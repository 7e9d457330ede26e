"""Who may enter, look and operate: superuser, operator, viewer, non-staff."""

from __future__ import annotations

import pytest
from django.urls import reverse

from containers.models import ContainerInstance
from containers.states import Status
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db

CHANGELISTS = [
    "admin:containers_containerinstance_changelist",
    "admin:containers_containertemplate_changelist",
    "admin:containers_runtime_changelist",
    "admin:containers_containerevent_changelist",
    "admin:containers_orphancontainer_changelist",
    "admin:outbox_outboxevent_changelist",
    "admin:containers_dashboard",
    "admin:index",
]
INSTANCE_ACTIONS = {"start_instances", "stop_instances", "delete_instances"}


@pytest.mark.parametrize("url_name", CHANGELISTS)
@pytest.mark.parametrize("who", ["superuser", "operator", "viewer"])
def test_staff_with_view_or_change_permission_can_look(request, as_user, who, url_name):
    client = as_user(request.getfixturevalue(who))
    assert client.get(reverse(url_name)).status_code == 200


@pytest.mark.parametrize("url_name", CHANGELISTS)
def test_non_staff_cannot_enter(as_user, outsider, url_name):
    response = as_user(outsider).get(reverse(url_name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_anonymous_is_sent_to_login(client):
    response = client.get(reverse("admin:containers_dashboard"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_any_permission_cannot_see_the_dashboard(as_user):
    from tests.admin.conftest import make_user

    response = as_user(make_user("bare")).get(reverse("admin:containers_dashboard"))
    assert response.status_code == 403


@pytest.mark.parametrize("who", ["superuser", "operator"])
def test_change_permission_offers_the_instance_actions(request, as_user, who):
    client = as_user(request.getfixturevalue(who))
    response = client.get(reverse("admin:containers_containerinstance_changelist"))
    offered = {name for name, _ in response.context["action_form"].fields["action"].choices}
    assert offered >= INSTANCE_ACTIONS


def test_view_permission_offers_no_instance_actions(as_user, viewer):
    InstanceFactory(status=Status.RUNNING)
    response = as_user(viewer).get(reverse("admin:containers_containerinstance_changelist"))
    assert response.context["action_form"] is None or not (
        INSTANCE_ACTIONS
        & {name for name, _ in response.context["action_form"].fields["action"].choices}
    )


def test_viewer_posting_an_action_changes_nothing(as_user, viewer):
    instance = InstanceFactory(status=Status.RUNNING)
    response = as_user(viewer).post(
        reverse("admin:containers_containerinstance_changelist"),
        {"action": "stop_instances", "_selected_action": [str(instance.pk)]},
    )
    assert response.status_code in (200, 302)
    instance.refresh_from_db()
    assert instance.status == Status.RUNNING


def test_viewer_cannot_add_an_instance(as_user, viewer, template, owner):
    url = reverse("admin:containers_containerinstance_add")
    client = as_user(viewer)
    assert client.get(url).status_code == 403
    response = client.post(url, {"template": template.pk, "owner": owner.pk, "name": "x"})
    assert response.status_code == 403
    assert not ContainerInstance.objects.exists()


def test_viewer_sees_the_instance_page_without_operate_buttons(as_user, viewer):
    instance = InstanceFactory(status=Status.RUNNING)
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    response = as_user(viewer).get(url)
    assert response.status_code == 200
    assert b'id="gb-stop"' not in response.content


def test_operator_sees_the_operate_buttons(as_user, operator):
    instance = InstanceFactory(status=Status.RUNNING)
    url = reverse("admin:containers_containerinstance_change", args=[instance.pk])
    response = as_user(operator).get(url)
    assert b'id="gb-stop"' in response.content


def test_viewer_sees_no_retry_now(as_user, viewer):
    response = as_user(viewer).get(reverse("admin:outbox_outboxevent_changelist"))
    form = response.context["action_form"]
    assert form is None or "retry_now" not in {n for n, _ in form.fields["action"].choices}


def test_index_links_the_dashboard_for_staff_who_may_see_it(as_user, viewer):
    response = as_user(viewer).get(reverse("admin:index"))
    assert reverse("admin:containers_dashboard").encode() in response.content
