"""The API's schema and Swagger UI are open to every logged-in user and show only the
operations that user may call (drf-spectacular, not public: each endpoint's permission
check runs as the caller)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def _operations(client) -> set[tuple[str, str]]:
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200, response.content[:300]
    paths = response.json()["paths"]
    return {(method, path) for path, item in paths.items() for method in item}


def test_a_user_s_schema_lists_what_a_user_may_call_and_nothing_else(callers):
    mine = _operations(callers["user"].api)
    for allowed in [
        ("post", "/api/containers/"),
        ("post", "/api/containers/{id}/stop/"),
        ("get", "/api/templates/"),
        ("post", "/api/tokens/"),
        ("get", "/api/tokens/"),
        ("delete", "/api/tokens/{id}/"),
    ]:
        assert allowed in mine, sorted(mine)
    refused = {
        (m, p)
        for m, p in mine
        if p.startswith(("/api/outbox/", "/api/runtimes/"))
        or (p.startswith("/api/templates/") and m != "get")
        or (p.startswith("/api/dag-templates/") and m != "get")
    }
    assert refused == set(), sorted(refused)


def test_an_operator_s_schema_lists_the_operations_their_permissions_allow(callers):
    operator, user = _operations(callers["operator"].api), _operations(callers["user"].api)
    assert ("get", "/api/outbox/") in operator and ("post", "/api/templates/") in operator
    assert user < operator, sorted(operator - user)


def test_the_schema_is_the_same_through_a_session(callers):
    assert _operations(callers["user"].web) == _operations(callers["user"].api)
