"""The front doors: ``/`` leads to the admin, ``/api/`` lists the API's endpoints,
and ``/favicon.ico`` answers."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_root_redirects_to_the_admin(client):
    response = client.get("/")
    assert (response.status_code, response["Location"]) == (302, "/admin/")


def test_api_root_lists_every_endpoint_without_login(client):
    response = client.get("/api/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["containers"]["url"] == "http://testserver/api/containers/"
    expected = {"containers", "templates", "runtimes", "queue", "outbox", "schema", "docs"}
    expected |= {"dag-templates", "dag-runs", "tokens", "events"}
    assert expected | {"metrics"} == set(body)
    for name, entry in body.items():
        path = entry["url"].removeprefix("http://testserver")
        assert client.get(path).status_code != 404, name


def test_api_docs_load_swagger_ui_from_local_static_files(client):
    from tests.factories import UserFactory

    client.force_login(UserFactory(username="reader"))  # the docs need a login
    html = client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower()


def test_favicon_answers_with_an_image(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("image/")
    assert b"<svg" in response.content


def test_admin_pages_link_the_favicon(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert re.search(r'<link rel="icon"[^>]+href="[^"]*favicon[^"]*"', html)
