"""Helpers shared by the API tests."""

from __future__ import annotations

from rest_framework.test import APIClient

from tests.factories import api_token


def token_client(user) -> APIClient:
    """A client that authenticates as ``user`` with ``Authorization: Token <key>``."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    return client


def assert_error(response, status: int, code: str | None = None):
    """The response is ``status`` in the API's one error shape (and ``code`` if given)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]
