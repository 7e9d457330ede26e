"""The seven kinds of caller the tenant rules name, each with a token and a session."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from tenants.roles import OPERATORS, VIEWERS, roles_install
from tests.api.helpers import token_client
from tests.factories import UserFactory

ROLES = ("anonymous", "user", "other", "staff", "viewer", "operator", "superuser")


@dataclass
class Caller:
    name: str
    user: object | None
    api: APIClient  # Authorization: Token <key> (none for anonymous)
    web: object  # django.test.Client, logged in (not for anonymous)


def _caller(name: str, user, client_class) -> Caller:
    web = client_class()
    if user is not None:
        web.force_login(user)
    return Caller(name, user, token_client(user) if user else APIClient(), web)


@pytest.fixture
def callers(db, client_class=None):
    """``{role: Caller}``: alice is "user" (she owns the objects the tests act on)."""
    from django.test import Client

    roles_install()
    users = {
        "user": UserFactory(username="alice"),
        "other": UserFactory(username="mallory"),
        "staff": UserFactory(username="bare-staff", is_staff=True),
        "viewer": UserFactory(username="vera", is_staff=True),
        "operator": UserFactory(username="otto", is_staff=True),
        "superuser": UserFactory(username="root", is_staff=True, is_superuser=True),
    }
    users["viewer"].groups.add(Group.objects.get(name=VIEWERS))
    users["operator"].groups.add(Group.objects.get(name=OPERATORS))
    result = {"anonymous": _caller("anonymous", None, Client)}
    result.update({name: _caller(name, user, Client) for name, user in users.items()})
    return result
