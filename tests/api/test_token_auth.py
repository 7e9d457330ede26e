"""Token authentication: one prepared statement reads the token and its user."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tenants.authentication import TokenAuthentication
from tests.api.helpers import assert_error, token_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_a_valid_token_authenticates_its_user_in_one_query(django_assert_num_queries):
    user = UserFactory(username="erin")
    key = Token.objects.create(user=user).key
    with django_assert_num_queries(1):
        authenticated, token = TokenAuthentication().authenticate_credentials(key)
        assert (authenticated.pk, authenticated.username, token.user.pk) == (
            user.pk,
            "erin",
            user.pk,
        )
    assert token.key == key and token.created == Token.objects.get(key=key).created
    response = APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/containers/")
    assert response.status_code == 200, response.content


def test_an_unknown_token_is_refused():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    assert_error(client.get("/api/containers/"), 401)


def test_the_token_of_an_inactive_user_is_refused():
    user = UserFactory(username="frank")
    client = token_client(user)
    user.is_active = False
    user.save(update_fields=["is_active"])
    body = assert_error(client.get("/api/containers/"), 401)
    assert "inactive" in body["message"], body
