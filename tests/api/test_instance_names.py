"""An owner's instance names are unique (``instance_name_per_owner``): a create under a
name the owner already has is a 409 ``name_taken`` that writes nothing; other owners
may use it; migration 0013 renamed existing duplicates deterministically."""

from __future__ import annotations

import datetime as dt
import importlib
import uuid

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from containers.models import ContainerEvent, ContainerInstance
from outbox.models import OutboxEvent
from tests.api.helpers import assert_error
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db


def test_a_second_create_under_a_name_the_owner_has_is_409_and_writes_nothing(alice, template):
    first = alice.post("/api/containers/", {"template": "sleeper", "name": "box"}, format="json")
    assert first.status_code == 202, first.content
    rows = (ContainerInstance.objects.count(), OutboxEvent.objects.count())
    again = alice.post("/api/containers/", {"template": "sleeper", "name": "box"}, format="json")
    error = assert_error(again, 409, "name_taken")
    assert error["details"]["name"] == "box", error
    assert (ContainerInstance.objects.count(), OutboxEvent.objects.count()) == rows


def test_another_owner_may_use_the_same_name(alice, mallory, template):
    for client in (alice, mallory):
        response = client.post(
            "/api/containers/", {"template": "sleeper", "name": "box"}, format="json"
        )
        assert response.status_code == 202, response.content
    owners = sorted(ContainerInstance.objects.filter(name="box").values_list("owner__username"))
    assert owners == [("alice",), ("mallory",)], owners


def test_an_instance_being_deleted_keeps_its_name_until_its_row_is_gone(alice, make_instance):
    going = make_instance("deleting", name="box")
    response = alice.post("/api/containers/", {"template": "sleeper", "name": "box"}, format="json")
    assert_error(response, 409, "name_taken")
    going.delete()  # what the delete handler does at its end
    response = alice.post("/api/containers/", {"template": "sleeper", "name": "box"}, format="json")
    assert response.status_code == 202, response.content


def test_the_migration_renames_duplicates_oldest_first_and_says_so(owner, other_user):
    migration = importlib.import_module("containers.migrations.0013_instance_name_per_owner")
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(
            "ALTER TABLE containers_containerinstance DROP CONSTRAINT instance_name_per_owner"
        )
    now = timezone.now()
    ids = [uuid.UUID(f"{digit}bcdef12-3456-4789-8abc-def012345678") for digit in "123"]
    for age, key in zip((3, 1, 2), ids, strict=True):
        made = InstanceFactory(id=key, owner=owner, name="box")
        ContainerInstance.objects.filter(pk=made.pk).update(
            created_at=now - dt.timedelta(hours=age)
        )
    theirs = InstanceFactory(owner=other_user, name="box")

    migration.rename_duplicates(apps, None)

    names = dict(ContainerInstance.objects.filter(owner=owner).values_list("id", "name"))
    assert names == {
        ids[0]: "box",  # the oldest keeps it
        ids[1]: "box-2bcdef12",
        ids[2]: "box-3bcdef12",
    }, names
    assert ContainerInstance.objects.get(pk=theirs.pk).name == "box"
    event = ContainerEvent.objects.get(instance_id=ids[1], kind="renamed")
    assert event.data == {"old_name": "box", "new_name": "box-2bcdef12"}, event.data
