"""Helpers shared by the API tests."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.test import APIClient

from tenants.models import ApiToken
from tests.factories import api_token


def token_client(user) -> APIClient:
    """A client that authenticates as ``user`` with ``Authorization: Token <key>``.

    Its token counts as used a moment ago, so that its requests cost what a token in use
    costs (one statement; ``last_used`` is written at most once a minute) and a test's
    query counts are the steady state's, not a first use's."""
    client = APIClient()
    key = api_token(user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    ApiToken.objects.filter(token_key=key[:15]).update(last_used=timezone.now())
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


def stream_get(client, path: str):
    """``GET path`` as ``client`` (its token, or its session) through Django's ASGI test
    client, reading the streaming body to its end: ``(response, body)``.

    A follow's body is an async iterator, which only an ASGI server streams; Django's
    ASGI client runs the views in this thread, so the test's transaction is seen.
    """
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    authorization = getattr(client, "_credentials", {}).get("HTTP_AUTHORIZATION")
    headers = {"Authorization": authorization} if authorization else {}

    async def get():
        asgi = AsyncClient()
        asgi.cookies = client.cookies
        response = await asgi.get(path, headers=headers)
        if not response.streaming:
            return response, response.content
        return response, b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(get)()
