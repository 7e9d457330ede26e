"""A user's own token page (``/account/tokens/``) and login (``/account/login/``): any
user, staff or not, logs in, makes a token (its key shown once), sees and revokes their
own; the login is under the same lockout as the admin's."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from tenants.models import ApiToken
from tests.factories import UserFactory, api_token

pytestmark = pytest.mark.django_db

PASSWORD = "a-user-pass-1"
LOGIN = "/account/login/"
PAGE = "/account/tokens/"


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice():
    user = UserFactory(username="alice")  # not staff
    user.set_password(PASSWORD)
    user.save()
    return user


def _login(username: str, password: str, *, address: str = "192.0.2.1"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(f"{LOGIN}?next={PAGE}", {"username": username, "password": password})
    return response, client


def _key_on(page) -> str | None:
    found = re.search(r'<code id="new-token-key">([0-9a-f]+)</code>', page.content.decode())
    return found and found.group(1)


def test_a_user_who_is_not_staff_logs_in_and_reaches_the_token_page(alice):
    response, client = _login("alice", PASSWORD)
    assert response.status_code == 302 and response["Location"] == PAGE, response
    page = client.get(PAGE)
    assert page.status_code == 200
    assert b"You have no API tokens." in page.content


def test_anonymous_visitors_are_sent_to_the_login_page():
    response = Client().get(PAGE)
    assert response.status_code == 302 and response["Location"] == f"{LOGIN}?next={PAGE}"


def test_a_token_made_on_the_page_is_shown_once_and_works(alice):
    client = Client()
    client.force_login(alice)
    made = client.post(PAGE, {"name": "laptop", "lifetime": "30"})
    assert made.status_code == 200, made.content
    key = _key_on(made)
    assert key and len(key) == 64, made.content.decode()
    assert "no-store" in made["Cache-Control"]
    again = client.get(PAGE)
    assert key not in again.content.decode() and _key_on(again) is None
    assert b"laptop" in again.content and key[:15].encode() in again.content
    token = ApiToken.objects.get(user=alice, name="laptop")
    assert token.expiry is not None, token.__dict__
    assert APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/tokens/").status_code == 200


def test_a_bad_name_is_refused_on_the_page_and_makes_nothing(alice):
    client = Client()
    client.force_login(alice)
    api_token(alice, name="ci")
    for data in ({"name": "", "lifetime": "30"}, {"name": "ci", "lifetime": "0"}):
        refused = client.post(PAGE, data)
        assert refused.status_code == 400, data
        assert _key_on(refused) is None
    assert list(ApiToken.objects.filter(user=alice).values_list("name", flat=True)) == ["ci"]


def test_revoking_on_the_page_stops_the_token(alice):
    key = api_token(alice, name="old")
    token = ApiToken.objects.get(name="old")
    client = Client()
    client.force_login(alice)
    response = client.post(f"/account/tokens/{token.pk}/revoke/")
    assert response.status_code == 302 and response["Location"] == PAGE
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    refused = APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/tokens/")
    assert refused.status_code == 401, refused.content


def test_another_user_s_token_is_a_404_on_the_page_and_stays(alice):
    api_token(UserFactory(username="mallory"), name="mallory-ci")
    theirs = ApiToken.objects.get(name="mallory-ci")
    client = Client()
    client.force_login(alice)
    assert b"mallory-ci" not in client.get(PAGE).content
    assert client.post(f"/account/tokens/{theirs.pk}/revoke/").status_code == 404
    assert client.post(f"/account/tokens/{'9' * 30}/revoke/").status_code == 404
    assert ApiToken.objects.filter(pk=theirs.pk).exists()


def test_the_user_login_is_locked_out_after_the_failure_limit(alice):
    statuses = [
        _login("alice", "wrong-password")[0].status_code for _ in range(settings.AXES_FAILURE_LIMIT)
    ]
    # The form again with its error, until the last failure locks the name out.
    assert statuses == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429], statuses
    response, client = _login("alice", PASSWORD)
    assert response.status_code == 429
    assert b"Too many failed logins" in response.content
    assert f'href="{LOGIN}"'.encode() in response.content  # back to the page it came from
    assert client.get(PAGE).status_code == 302  # not logged in
    # The lockout is one: the admin's login refuses alice now too.
    admin = Client(REMOTE_ADDR="192.0.2.9").post(
        "/admin/login/", {"username": "alice", "password": PASSWORD}
    )
    assert admin.status_code == 429


def test_logging_out_ends_the_session(alice):
    client = Client()
    client.force_login(alice)
    assert client.post("/account/logout/").status_code == 302
    assert client.get(PAGE).status_code == 302


def test_the_api_docs_open_to_a_user_who_is_not_staff(alice):
    _response, client = _login("alice", PASSWORD)
    assert client.get("/api/docs/").status_code == 200
