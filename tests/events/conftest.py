"""Fixtures of the events feed's tests: entries that really commit.

The feed serves only entries of transactions that have ended (``core.write_order``),
so these tests cannot run inside pytest-django's per-test transaction, and a
transactional test's flush of every table costs seconds on a busy machine. Instead
``committed`` lets the test write in autocommit and, afterwards, deletes exactly the
rows made since it began (users and what hangs off them, entries, instances,
templates, runtimes and their history)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.db.models import Max

from containers.models import (
    ContainerEvent,
    ContainerInstance,
    ContainerTemplate,
    Runtime,
    RuntimeEvent,
)
from dags.models import DagEvent, DagRun
from outbox.models import OutboxEvent
from tenants.models import ApiToken
from tests.api.helpers import token_client
from tests.factories import UserFactory

_MARKED = (ContainerEvent, DagEvent, RuntimeEvent, OutboxEvent, ContainerTemplate, Runtime)


@pytest.fixture
def committed(request, django_db_blocker):
    # pytest-django sets the test database up, at its first use, for the tests that carry
    # a django_db mark; these ask for it here, after the mark's per-test transaction was
    # decided (none), so that they also run alone (``-k``).
    request.node.add_marker(pytest.mark.django_db)
    request.getfixturevalue("django_db_setup")
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            pytest.skip("the feed's horizon is PostgreSQL's (SQLite needs none)")
        User = get_user_model()
        marks = {model: model.objects.aggregate(top=Max("pk"))["top"] or 0 for model in _MARKED}
        first_user = (User.objects.aggregate(top=Max("pk"))["top"] or 0) + 1
        try:
            yield
        finally:
            new_users = User.objects.filter(pk__gte=first_user)
            for model in (ContainerEvent, DagEvent, RuntimeEvent, OutboxEvent):
                model.objects.filter(pk__gt=marks[model]).delete()
            DagRun.objects.filter(owner__in=new_users).delete()
            ContainerInstance.objects.filter(owner__in=new_users).delete()
            for model in (ContainerTemplate, Runtime):
                model.objects.filter(pk__gt=marks[model]).delete()
            ApiToken.objects.filter(user__in=new_users).delete()
            new_users.delete()


@pytest.fixture
def people(committed):
    """Committed users and their token clients: alice and mallory (users), root (an
    operator: sees every owner's entries)."""
    from tenants.roles import OPERATORS, roles_install

    roles_install()
    alice = UserFactory(username="ev-alice")
    mallory = UserFactory(username="ev-mallory")
    root = UserFactory(username="ev-root", is_staff=True)
    root.groups.add(Group.objects.get(name=OPERATORS))
    return {
        "alice": alice,
        "mallory": mallory,
        "root": root,
        "as_alice": token_client(alice),
        "as_mallory": token_client(mallory),
        "as_root": token_client(root),
    }
