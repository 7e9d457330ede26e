"""``/healthz`` and ``/readyz`` (core.probes): cheap, unauthenticated, never a 500, and
answered before the host check, the HTTPS redirect, the session and CSRF."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.db import connection
from django.test import Client

from core import probes
from tests.processes import REPO, free_port

pytestmark = pytest.mark.django_db

POD_HOST = "gobrave-web-5d9c7.pod.cluster.internal:8000"  # not in ALLOWED_HOSTS


def test_healthz_answers_without_touching_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_readyz_answers_ok_with_one_query_when_every_migration_is_applied(
    client, django_assert_num_queries
):
    probes.database_unready()  # the migrations on disk are read once per process
    with django_assert_num_queries(1):
        response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok"}


def test_readyz_is_503_naming_a_migration_not_applied(client, postgres):
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'outbox' AND name = '0001_initial'"
        )
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": "1 migration(s) not applied: outbox.0001_initial",
    }


def test_readyz_is_503_on_a_database_never_migrated(client, postgres):
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("ALTER TABLE django_migrations RENAME TO django_migrations_away")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["reason"] == "migrations not applied: the database has none"


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_pass_the_host_check_https_redirect_and_sessions(settings, path):
    settings.SECURE_SSL_REDIRECT = True
    response = Client().get(path, HTTP_HOST=POD_HOST)
    assert response.status_code == 200, response.content
    assert "Set-Cookie" not in response.headers
    assert Client().get("/admin/login/", HTTP_HOST=POD_HOST).status_code == 400  # others do not


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_refuse_writes_with_405_not_a_csrf_failure(path):
    response = Client(enforce_csrf_checks=True).post(path)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert Client().head(path).status_code == 200


def test_a_failing_probe_is_a_503_never_a_500(client, monkeypatch):
    def broken():
        raise RuntimeError("boom")

    monkeypatch.setitem(probes.PROBES, "/readyz", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "reason": "RuntimeError"}


READYZ_IN_A_PROCESS = """
import django, json
django.setup()
from django.test import Client
for path in ("/healthz", "/readyz"):
    response = Client().get(path)
    print(json.dumps([path, response.status_code, response.json()]))
"""


def test_readyz_is_503_and_healthz_200_when_the_database_does_not_answer():
    """A web process whose database is down (a closed loopback port): it stays alive
    (healthz) and takes no traffic (readyz)."""
    url = f"postgres://postgres@127.0.0.1:{free_port()}/gobrave"
    env = {**os.environ, "DATABASE_URL": url, "DATABASE_POOL_MAX": "0"}
    env["DJANGO_SETTINGS_MODULE"] = "gobrave.settings"
    done = subprocess.run(
        [sys.executable, "-c", READYZ_IN_A_PROCESS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    down = {"status": "unavailable", "reason": "database unavailable (OperationalError)"}
    assert answers == [["/healthz", 200, {"status": "ok"}], ["/readyz", 503, down]]
