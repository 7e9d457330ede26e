"""The authentication backend reads a user's permissions, own and groups', in one query."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _permission(codename):
    return Permission.objects.get(codename=codename, content_type__app_label="containers")


@pytest.fixture
def user():
    user = UserFactory(username="carol")
    user.user_permissions.add(_permission("view_runtime"))
    group = Group.objects.create(name="writers")
    group.permissions.add(_permission("change_containertemplate"))
    user.groups.add(group)
    return user


def test_own_and_group_permissions_are_read_in_one_query(user, django_assert_num_queries):
    with django_assert_num_queries(1):
        assert user.has_perm("containers.view_runtime")  # own
        assert user.has_perm("containers.change_containertemplate")  # a group's
        assert not user.has_perm("containers.change_containerinstance")
    assert user.get_all_permissions() == {
        "containers.view_runtime",
        "containers.change_containertemplate",
    }


def test_an_inactive_user_has_none(user):
    user.is_active = False
    assert not user.has_perm("containers.view_runtime")
    assert user.get_all_permissions() == set()


def test_a_user_outside_the_group_has_only_their_own(user):
    other = UserFactory(username="dave")
    other.user_permissions.add(_permission("view_runtime"))
    assert other.get_all_permissions() == {"containers.view_runtime"}
