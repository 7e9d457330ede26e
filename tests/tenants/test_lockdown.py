"""What nobody needs is locked: django-q2's admin and scheduler, /metrics, the schema and
the docs, API tokens, and the fake runtime driver outside tests."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from containers.engines import engine_for
from containers.engines.base import PermanentEngineError
from containers.models import Runtime
from tests.factories import RuntimeFactory

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-metrics-token-0123"


@pytest.mark.parametrize("model", ["schedule", "success", "failure", "ormq"])
def test_django_q2_admin_pages_are_gone_even_for_superusers(callers, model):
    superuser = callers["superuser"].web
    assert superuser.get(f"/admin/django_q/{model}/").status_code == 404
    assert superuser.get(f"/admin/django_q/{model}/add/").status_code == 404
    assert b"/admin/django_q/" not in superuser.get("/admin/").content


def test_django_q2_scheduler_is_off_on_every_cluster():
    clusters = [settings.Q_CLUSTER, *settings.Q_CLUSTER["ALT_CLUSTERS"].values()]
    assert [cluster["scheduler"] for cluster in clusters] == [False, False, False]


def test_metrics_answer_loopback_clients_without_a_token(gobrave_config):
    gobrave_config(api={"metrics_token": None})
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200
    refused = Client(REMOTE_ADDR="203.0.113.7").get("/metrics")
    assert refused.status_code == 403
    assert b"gobrave_" not in refused.content


def test_metrics_need_the_bearer_token_when_one_is_set(gobrave_config):
    gobrave_config(api={"metrics_token": TOKEN})
    remote = Client(REMOTE_ADDR="203.0.113.7")
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": TOKEN}):
        response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics", **headers)
        assert response.status_code == 401, headers
        assert response["WWW-Authenticate"].startswith("Bearer")
    granted = remote.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert granted.status_code == 200
    assert b"gobrave_queue_pending" in granted.content


def test_the_schema_needs_a_login(callers):
    assert callers["anonymous"].api.get("/api/schema/").status_code == 401
    assert callers["user"].api.get("/api/schema/").status_code == 200


def test_the_docs_send_anonymous_browsers_to_the_users_login_page(callers):
    response = callers["anonymous"].web.get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert "next=/api/docs/" in response["Location"]


def test_the_docs_load_swagger_ui_from_local_files_for_a_logged_in_user(callers):
    response = callers["user"].web.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "unpkg" not in html.lower()


def test_api_tokens_are_for_superusers_only_whatever_the_permissions(callers):
    operator = callers["operator"]
    operator.user.user_permissions.add(*Permission.objects.filter(codename__endswith="apitoken"))
    url = reverse("admin:tenants_apitoken_changelist")
    assert operator.web.get(url).status_code == 403
    assert b"apitoken" not in operator.web.get("/admin/").content
    page = callers["superuser"].web.get(url)
    assert page.status_code == 200
    assert b"alice" in page.content  # her token (the callers' API client) is listed


@pytest.fixture
def production(settings):
    settings.GOBRAVE_FAKE_RUNTIME = False


def test_a_fake_runtime_row_runs_nothing_outside_tests(production, tmp_path):
    row = RuntimeFactory(name="sim", base_url=f"fake://{tmp_path}")
    with pytest.raises(PermanentEngineError, match="fake driver is for tests only"):
        engine_for(row)


def test_the_admin_does_not_offer_the_fake_driver_outside_tests(production, callers):
    superuser = callers["superuser"].web
    url = reverse("admin:containers_runtime_add")
    form = superuser.get(url).context["adminform"].form
    assert [value for value, _ in form.fields["driver"].choices] == ["docker", "kubernetes"]
    response = superuser.post(
        url, {"name": "sim", "driver": "fake", "base_url": "fake:///tmp/x", "labels": "{}"}
    )
    assert response.status_code == 200
    assert "driver" in response.context["adminform"].form.errors
    assert not Runtime.objects.filter(name="sim").exists()


def test_tests_may_choose_the_fake_driver(callers, tmp_path):
    assert settings.GOBRAVE_FAKE_RUNTIME is True
    assert engine_for(RuntimeFactory(name="sim", base_url=f"fake://{tmp_path}")) is not None


def test_a_superuser_revokes_a_user_s_token_in_the_admin(callers):
    from rest_framework.test import APIClient

    from tenants.models import ApiToken
    from tests.factories import api_token

    key = api_token(callers["user"].user, name="leaked")
    token = ApiToken.objects.get(name="leaked")
    url = reverse("admin:tenants_apitoken_delete", args=[token.pk])
    response = callers["superuser"].web.post(url, {"post": "yes"})
    assert response.status_code == 302, response.content[:300]
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/tokens/").status_code == 401
