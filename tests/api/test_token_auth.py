"""Token authentication: one prepared statement reads the token and its user; a token used
again within a minute writes nothing."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tenants.authentication import TokenAuthentication
from tenants.models import ApiToken
from tests.api.helpers import assert_error, token_client
from tests.factories import UserFactory, api_token

pytestmark = pytest.mark.django_db


def test_a_valid_token_authenticates_its_user_in_one_query(django_assert_num_queries):
    user = UserFactory(username="erin")
    key = api_token(user, name="ci")
    auth = TokenAuthentication()
    with django_assert_num_queries(2):  # the read, and last_used (first use)
        auth.authenticate_credentials(key.encode())
    with django_assert_num_queries(1):  # within the minute: the read alone
        authenticated, token = auth.authenticate_credentials(key.encode())
        assert (authenticated.pk, authenticated.username, token.user.pk) == (
            user.pk,
            "erin",
            user.pk,
        )
    assert token.pk == ApiToken.objects.get(name="ci").pk
    response = APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/containers/")
    assert response.status_code == 200, response.content


def test_an_unknown_token_is_refused():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 64)
    assert_error(client.get("/api/containers/"), 401)


def test_a_key_sharing_a_token_s_prefix_is_refused():
    key = api_token(UserFactory(username="erin"))
    forged = key[:15] + "0" * 49 if key[15:] != "0" * 49 else key[:15] + "1" * 49
    assert_error(APIClient(HTTP_AUTHORIZATION=f"Token {forged}").get("/api/containers/"), 401)


def test_the_token_of_an_inactive_user_is_refused():
    user = UserFactory(username="frank")
    client = token_client(user)
    user.is_active = False
    user.save(update_fields=["is_active"])
    body = assert_error(client.get("/api/containers/"), 401)
    assert "inactive" in body["message"], body
