"""Self-service API tokens (``/api/tokens/``, django-rest-knox): a user makes, lists and
revokes their own; a key is shown once and stored only as a hash; an expired or revoked
token is refused; another user's tokens are out of reach."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.models import ApiToken
from tests.api.helpers import assert_error, token_client
from tests.factories import UserFactory, api_token

pytestmark = pytest.mark.django_db


def _client(key: str) -> APIClient:
    return APIClient(HTTP_AUTHORIZATION=f"Token {key}")


@pytest.fixture
def alice():
    return UserFactory(username="alice")


def _create(client, **body):
    return client.post("/api/tokens/", body, format="json")


def test_a_new_token_s_key_is_in_the_create_answer_only(alice):
    client = token_client(alice)
    response = _create(client, name="ci")
    assert response.status_code == 201, response.content
    created = response.json()
    assert response["Cache-Control"] == "no-store"
    assert len(created["key"]) == 64 and created["prefix"] == created["key"][:15], created
    assert created["name"] == "ci" and created["expiry"] is None, created
    listed = client.get("/api/tokens/").json()["results"]
    ours = [row for row in listed if row["id"] == created["id"]]
    assert ours and set(ours[0]) == {
        "id", "name", "prefix", "created", "expiry", "expired", "last_used"
    }, listed  # fmt: skip
    assert created["key"] not in client.get("/api/tokens/").content.decode()
    browsable = client.get("/api/tokens/?format=api").content.decode()
    assert created["key"] not in browsable
    assert _client(created["key"]).get("/api/containers/").status_code == 200


def test_the_database_holds_no_usable_key(alice):
    key = _create(token_client(alice), name="ci").json()["key"]
    row = ApiToken.objects.get(name="ci")
    assert row.digest != key and len(row.digest) == 128, row.digest
    # The stored digest is no key: sent as one, it is refused.
    assert_error(_client(row.digest).get("/api/containers/"), 401, "authentication_failed")
    assert_error(_client(row.digest[:64]).get("/api/containers/"), 401, "authentication_failed")
    # No column of any row of the table holds the key.
    table = ApiToken._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        rows = cursor.fetchall()
    assert rows and not [r for r in rows if any(key in str(value) for value in r)], rows


def test_an_expired_token_is_refused_with_401_in_the_api_shape(alice):
    key = api_token(alice, name="short", expiry=timezone.now() + dt.timedelta(days=1))
    assert _client(key).get("/api/containers/").status_code == 200
    ApiToken.objects.filter(name="short").update(expiry=timezone.now() - dt.timedelta(seconds=1))
    error = assert_error(_client(key).get("/api/containers/"), 401, "authentication_failed")
    assert error["message"] == "Token expired.", error
    listed = token_client(alice).get("/api/tokens/").json()["results"]
    assert [(t["name"], t["expired"]) for t in listed if t["name"] == "short"] == [
        ("short", True)
    ], listed


def test_a_revoked_token_is_refused(alice):
    key = api_token(alice, name="laptop")
    token_id = ApiToken.objects.get(name="laptop").pk
    response = token_client(alice).delete(f"/api/tokens/{token_id}/")
    assert response.status_code == 204, response.content
    assert not ApiToken.objects.filter(pk=token_id).exists()
    assert_error(_client(key).get("/api/containers/"), 401, "authentication_failed")


def test_a_token_may_revoke_itself(alice):
    key = api_token(alice, name="self")
    token_id = ApiToken.objects.get(name="self").pk
    assert _client(key).delete(f"/api/tokens/{token_id}/").status_code == 204
    assert_error(_client(key).get("/api/tokens/"), 401, "authentication_failed")


def test_another_user_s_token_can_be_neither_listed_nor_revoked(alice):
    mallory_key = api_token(UserFactory(username="mallory"), name="mallory-ci")
    theirs = ApiToken.objects.get(name="mallory-ci")
    client = token_client(alice)
    listed = client.get("/api/tokens/").json()["results"]
    assert "mallory-ci" not in [t["name"] for t in listed], listed
    assert_error(client.delete(f"/api/tokens/{theirs.pk}/"), 404, "not_found")
    assert ApiToken.objects.filter(pk=theirs.pk).exists()
    assert _client(mallory_key).get("/api/containers/").status_code == 200


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ci", "expiry": "yesterday"}, "expiry"),
        ({"name": "ci", "expiry": "2020-01-01T00:00:00Z"}, "expiry"),
        ({"name": "ci", "scopes": ["all"]}, "scopes"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_makes_no_token(alice, body, field):
    client = token_client(alice)
    before = ApiToken.objects.count()
    error = assert_error(_create(client, **body), 400, "invalid")
    assert field in error["details"] or error["details"].get("field") == field, error
    assert ApiToken.objects.count() == before


def test_a_user_s_token_names_are_unique(alice):
    client = token_client(alice)
    assert _create(client, name="ci").status_code == 201
    error = assert_error(_create(client, name="ci"), 400, "invalid")
    assert error["details"] == {"field": "name"} and "already" in error["message"], error
    assert _create(token_client(UserFactory(username="bob")), name="ci").status_code == 201


def test_a_user_holds_at_most_tokens_per_user_unexpired_tokens(alice, gobrave_config):
    gobrave_config(api={"tokens_per_user": 3})
    client = token_client(alice)  # its own token is the first of the three
    api_token(alice, name="old")
    ApiToken.objects.filter(name="old").update(expiry=timezone.now() - dt.timedelta(days=1))
    assert _create(client, name="ci").status_code == 201
    third = _create(client, name="deploy")
    assert third.status_code == 201, third.content  # the expired one does not count
    error = assert_error(_create(client, name="one-more"), 400, "invalid")
    assert error["details"] == {"limit": 3} and "revoke one first" in error["message"], error
    assert not ApiToken.objects.filter(user=alice, name="one-more").exists()
    # Others are not held to alice's count; a revoke makes room again.
    assert _create(token_client(UserFactory(username="bob")), name="ci").status_code == 201
    assert client.delete(f"/api/tokens/{third.json()['id']}/").status_code == 204
    assert _create(client, name="one-more").status_code == 201


def test_an_expiry_in_the_future_is_kept(alice):
    when = (timezone.now() + dt.timedelta(days=3)).replace(microsecond=0)
    response = _create(token_client(alice), name="week", expiry=when.isoformat())
    assert response.status_code == 201, response.content
    assert ApiToken.objects.get(name="week").expiry == when


@pytest.mark.parametrize("path", ["/api/tokens/x/", "/api/tokens/1e3/", f"/api/tokens/{'9' * 30}/"])
def test_an_id_that_is_no_number_is_a_404(alice, path):
    assert_error(token_client(alice).delete(path), 404, "not_found")


def test_anonymous_callers_get_401():
    assert_error(APIClient().get("/api/tokens/"), 401, "not_authenticated")
    assert_error(APIClient().post("/api/tokens/", {"name": "x"}, format="json"), 401)


def test_last_used_is_recorded(alice):
    key = api_token(alice, name="used")
    assert ApiToken.objects.get(name="used").last_used is None
    _client(key).get("/api/containers/")
    row = ApiToken.objects.get(name="used")
    assert row.last_used is not None, row.__dict__
