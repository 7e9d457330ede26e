"""API fixtures: token-authenticated clients for a user, another user and an operator."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.api.helpers import token_client
from tests.factories import InstanceFactory, UserFactory


@pytest.fixture
def staff_user():
    """An operator: staff in the ready-made operators group (the staff flag alone is nothing)."""
    from django.contrib.auth.models import Group

    from tenants.roles import OPERATORS, roles_install

    roles_install()
    user = UserFactory(username="root", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATORS))
    return user


@pytest.fixture
def other_user():
    return UserFactory(username="mallory")


@pytest.fixture
def anon():
    return APIClient()


@pytest.fixture
def alice(owner):
    return token_client(owner)


@pytest.fixture
def mallory(other_user):
    return token_client(other_user)


@pytest.fixture
def staff(staff_user):
    return token_client(staff_user)


@pytest.fixture
def clients(anon, alice, mallory, staff):
    return {"anonymous": anon, "owner": alice, "other": mallory, "staff": staff}


@pytest.fixture
def make_instance(owner, template, fake_runtime):
    """An instance of ``owner`` placed directly in ``status`` (bypassing requests)."""

    def make(status="pending", **fields):
        from containers.models import ContainerInstance

        instance = InstanceFactory(
            owner=fields.pop("owner", owner), template=template, runtime=fake_runtime, **fields
        )
        ContainerInstance.objects.filter(pk=instance.pk).update(status=status)
        instance.refresh_from_db()
        return instance

    return make
