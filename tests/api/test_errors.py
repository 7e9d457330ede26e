"""One error shape for every error, the right status for each, and never a 500 for input."""

from __future__ import annotations

import json
import logging

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db


def test_anonymous_is_401_with_www_authenticate(anon):
    response = anon.get("/api/containers/")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize(
    "header",
    ["Token nope", "Token", "Token a b", "Token \x00abc", "Token caf\u00e9", "Bearer x"],
)
def test_bad_credentials_are_401(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/containers/")
    if header.startswith("Bearer"):  # not our scheme: simply not authenticated
        assert_error(response, 401, "not_authenticated")
    else:
        assert_error(response, 401, "authentication_failed")


def test_malformed_session_cookie_is_401(anon):
    anon.cookies["sessionid"] = "abcdefgh\x00ijkl"
    assert_error(anon.get("/api/containers/"), 401, "not_authenticated")


def test_api_token_create_prints_a_working_key(owner, capsys):
    call_command("api_token_create", "alice", "--name", "ci")
    key = capsys.readouterr().out.strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/containers/").status_code == 200


def test_session_authentication_works_for_the_browsable_api(owner):
    client = APIClient()
    client.force_login(owner)
    assert client.get("/api/containers/").status_code == 200
    browsable = client.get("/api/containers/", HTTP_ACCEPT="text/html")
    assert browsable.status_code == 200
    assert b"<html" in browsable.content.lower()


def test_session_post_without_csrf_token_is_403_in_our_shape(owner, template):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post("/api/containers/", {"template": "sleeper"}, format="json")
    error = assert_error(response, 403, "permission_denied")
    assert "CSRF" in error["message"]


def test_malformed_json_is_400_parse_error(alice):
    response = alice.post("/api/containers/", "{not json", content_type="application/json")
    assert_error(response, 400, "parse_error")


def test_json_nested_too_deeply_is_400(alice):
    body = "[" * 100_000 + "]" * 100_000
    response = alice.post("/api/containers/", body, content_type="application/json")
    assert_error(response, 400, "parse_error")


def test_non_finite_numbers_are_refused(alice, template):
    response = alice.post("/api/containers/", '{"template": NaN}', content_type="application/json")
    assert_error(response, 400, "parse_error")


def test_body_over_the_upload_limit_is_400(alice, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"template": "x", "name": "n" * 2000})
    response = alice.post("/api/containers/", body, content_type="application/json")
    assert_error(response, 400, "parse_error")


def test_form_encoded_body_is_415(alice):
    response = alice.post("/api/containers/", {"template": "sleeper"})  # multipart
    assert_error(response, 415, "unsupported_media_type")


def test_unsupported_method_is_405(alice, make_instance):
    instance = make_instance()
    assert_error(alice.put(f"/api/containers/{instance.pk}/", {}), 405, "method_not_allowed")
    assert_error(alice.get(f"/api/containers/{instance.pk}/start/"), 405, "method_not_allowed")


def test_unacceptable_representation_is_406(alice):
    response = alice.get("/api/containers/", HTTP_ACCEPT="text/csv")
    assert_error(response, 406, "not_acceptable")


@pytest.mark.parametrize("path", ["/api/nope/", "/api/containers/x/y/z/", "/api/outbox/1/x/"])
def test_unknown_api_url_is_404_in_our_shape(alice, path):
    assert_error(alice.get(path), 404, "not_found")


def test_unexpected_error_is_a_logged_500_in_our_shape(alice, monkeypatch, caplog):
    from containers import selectors

    def broken(**kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(selectors, "queue_stats", broken)
    with caplog.at_level(logging.ERROR, logger="core.api.errors"):
        response = alice.get("/api/queue/")
    error = assert_error(response, 500, "server_error")
    assert "bug" not in error["message"]  # no internals leak
    assert "unexpected error in QueueView" in caplog.text


def test_throttled_requests_answer_429_with_retry_after():
    from rest_framework.exceptions import Throttled

    from core.api.errors import exception_handler

    response = exception_handler(Throttled(wait=0.2), {})
    assert response.status_code == 429
    assert response["Retry-After"] == "1"
    assert response.data["error"]["code"] == "throttled"


@pytest.mark.parametrize(
    "body", [b'{"template": "\\ud800"}', b'{"template": "t", "env": {"\\udfff": "x"}}']
)
def test_a_lone_surrogate_in_json_is_a_400_not_a_500(alice, template, body):
    response = alice.post("/api/containers/", data=body, content_type="application/json")
    assert_error(response, 400, "parse_error")
