"""Logins are limited: after ``AXES_FAILURE_LIMIT`` wrong passwords a user, and an address,
are locked out until the cool-off, before any password is hashed; passwords must pass
Django's four validators."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import password_validation
from django.contrib.auth.hashers import MD5PasswordHasher
from django.core.exceptions import ValidationError
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "console-pass-1"
LOGIN = "/admin/login/?next=/admin/"


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    """MD5: these tests count hashes, they do not measure them."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def hashes(monkeypatch):
    """Every password hashed: checking one hashes it (``verify`` calls ``encode``), and so
    does a login as an unknown user (Django hashes anyway, so that it takes as long)."""
    calls = []
    original = MD5PasswordHasher.encode

    def counted(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MD5PasswordHasher, "encode", counted)
    return calls


def _user(username: str):
    user = UserFactory(username=username, is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


def _login(username: str, password: str, *, address: str, **headers):
    client = Client(REMOTE_ADDR=address, **headers)
    response = client.post(LOGIN, {"username": username, "password": password})
    return response, client


def _fail(username: str, *, address: str, times: int | None = None) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT if times is None else times):
        response, _client = _login(username, "wrong-password", address=address)
        assert response.status_code in (200, 429)


def _logged_in(client: Client) -> bool:
    return client.get("/admin/").status_code == 200


def test_after_the_failure_limit_the_right_password_is_refused_with_a_page_that_says_why():
    _user("alice")
    _fail("alice", address="192.0.2.1")
    response, client = _login("alice", PASSWORD, address="192.0.2.1")
    assert response.status_code == 429
    assert response["Content-Type"].startswith("text/html")
    assert b"Too many failed logins" in response.content
    assert not _logged_in(client)


def test_lockout_holds_per_user_and_per_address_and_spares_the_others():
    _user("alice"), _user("bob"), _user("carol")
    _fail("alice", address="192.0.2.1")
    assert _login("alice", PASSWORD, address="192.0.2.9")[0].status_code == 429  # the user
    assert _login("carol", PASSWORD, address="192.0.2.1")[0].status_code == 429  # the address
    response, client = _login("bob", PASSWORD, address="192.0.2.2")
    assert response.status_code == 302 and _logged_in(client)


def test_the_right_password_is_accepted_again_after_the_cool_off():
    from axes.models import AccessAttempt

    _user("alice")
    _fail("alice", address="192.0.2.1")
    assert _login("alice", PASSWORD, address="192.0.2.1")[0].status_code == 429
    past = settings.AXES_COOLOFF_TIME + timedelta(seconds=1)
    for attempt in AccessAttempt.objects.all():
        AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=attempt.attempt_time - past)
    response, client = _login("alice", PASSWORD, address="192.0.2.1")
    assert response.status_code == 302 and _logged_in(client)


def test_a_flood_from_one_address_hashes_at_most_the_failure_limit_of_passwords(hashes):
    _user("alice")
    hashes.clear()
    for n in range(4 * settings.AXES_FAILURE_LIMIT):  # any user name, known or not
        _login("alice" if n % 2 else f"nobody{n}", "wrong-password", address="192.0.2.1")
    assert len(hashes) == settings.AXES_FAILURE_LIMIT
    hashes.clear()
    assert _login("alice", PASSWORD, address="192.0.2.1")[0].status_code == 429
    assert hashes == []


def test_behind_a_proxy_the_client_address_comes_from_its_header(settings):
    settings.GOBRAVE_CLIENT_IP_HEADER = "HTTP_X_REAL_IP"
    _user("bob"), _user("carol")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _login("nobody", "wrong-password", address="10.0.0.1", HTTP_X_REAL_IP="198.51.100.1")
    refused = _login("carol", PASSWORD, address="10.0.0.1", HTTP_X_REAL_IP="198.51.100.1")[0]
    assert refused.status_code == 429
    # Another client behind the same proxy logs in.
    response = _login("bob", PASSWORD, address="10.0.0.1", HTTP_X_REAL_IP="198.51.100.2")[0]
    assert response.status_code == 302


@pytest.mark.parametrize(
    ("password", "says"),
    [
        ("password123", "too common"),
        ("48151623424815", "entirely numeric"),
        ("alice.liddell", "too similar"),
    ],
)
def test_passwords_must_pass_the_common_numeric_and_similarity_validators(password, says):
    user = UserFactory.build(username="alice.liddell")
    with pytest.raises(ValidationError, match=says):
        password_validation.validate_password(password, user)


@pytest.mark.parametrize("header", ["HTTP_USER_AGENT", "HTTP_ACCEPT", "HTTP_X_REAL_IP"])
def test_nul_bytes_in_the_headers_a_login_records_are_no_500(settings, header):
    settings.GOBRAVE_CLIENT_IP_HEADER = "HTTP_X_REAL_IP"
    _user("alice"), _user("bob")
    sent = {header: "a\x00b"}
    _fail("alice", address="192.0.2.1")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response, _client = _login("alice", "wrong-password", address="192.0.2.1", **sent)
        assert response.status_code == 429
    response, client = _login("bob", PASSWORD, address="192.0.2.2", **sent)
    assert response.status_code == 302 and _logged_in(client)
