"""Keys made by DRF's authtoken before django-rest-knox keep working: migration 0005 turns
each into a knox digest of the same key and drops DRF's plain-text table."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.models import ApiToken
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

OLD_KEY = "0123456789abcdef0123456789abcdef01234567"  # DRF's form: 40 hex characters
migration = importlib.import_module("tenants.migrations.0005_drf_tokens_to_api_tokens")


def _drf_table_with(user, key: str, created: dt.datetime) -> None:
    """DRF authtoken's table (its migrations' schema) holding one key."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created timestamptz NOT NULL, user_id integer NOT NULL UNIQUE "
            "REFERENCES auth_user (id))"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", [key, created, user.pk])


def _migrate() -> None:
    state = MigrationLoader(connection).project_state(("tenants", "0004_api_tokens"))
    with connection.schema_editor() as editor:
        migration.copy_drf_tokens(state.apps, editor)


def test_an_old_drf_key_authenticates_after_the_migration_and_its_table_is_gone():
    user = UserFactory(username="old-timer")
    created = timezone.now() - dt.timedelta(days=400)
    _drf_table_with(user, OLD_KEY, created)
    _migrate()
    response = APIClient(HTTP_AUTHORIZATION=f"Token {OLD_KEY}").get("/api/tokens/")
    assert response.status_code == 200, response.content
    (listed,) = response.json()["results"]
    assert listed["name"] == f"token from before {created:%Y-%m-%d}", listed
    assert listed["prefix"] == OLD_KEY[:15] and listed["expiry"] is None, listed
    row = ApiToken.objects.get(user=user)
    assert row.created == created and row.digest != OLD_KEY, row.__dict__
    assert "authtoken_token" not in connection.introspection.table_names()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
        assert not [r for r in cursor.fetchall() if any(OLD_KEY in str(v) for v in r)]


def test_without_drf_s_table_the_migration_does_nothing():
    UserFactory(username="new")
    _migrate()
    assert ApiToken.objects.count() == 0
