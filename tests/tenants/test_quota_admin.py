"""The user quota form: a user is picked by name, and an unknown name is a form error."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tenants.models import UserQuota
from tenants.roles import OPERATORS, roles_install
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ADD = "/admin/tenants/userquota/add/"


@pytest.fixture
def operator_client() -> Client:
    roles_install()
    user = UserFactory(username="op-1", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATORS))
    client = Client()
    client.force_login(user)
    return client


def _form(user: str) -> dict:
    return {"user": user, "max_pending_per_owner": "2", "max_instances_per_owner": ""}


def test_an_operator_sets_a_users_quota_by_username(operator_client):
    carol = UserFactory(username="carol")
    response = operator_client.post(ADD, _form("carol"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert UserQuota.objects.get(user=carol).max_pending_per_owner == 2


def test_an_unknown_username_is_a_form_error_that_names_it(operator_client):
    response = operator_client.post(ADD, _form("nobody-here"))
    assert response.status_code == 200
    assert "No user is named" in response.content.decode()
    assert "nobody-here" in response.content.decode()
    assert not UserQuota.objects.exists()


def test_the_change_form_shows_the_username_not_the_id(operator_client):
    carol = UserFactory(username="carol")
    quota = UserQuota.objects.create(user=carol, max_pending_per_owner=1)
    page = operator_client.get(f"/admin/tenants/userquota/{quota.pk}/change/").content.decode()
    assert 'name="user" value="carol"' in page
