"""The runtime's admin form: how to reach the engine (address and TLS file paths), checked
by ``Runtime.clean``; a refused address saves nothing and says why."""

from __future__ import annotations

import pytest
from django.test import Client

from containers.models import Runtime
from tests.pki import Pki

pytestmark = pytest.mark.django_db
ADD = "/admin/containers/runtime/add/"


@pytest.fixture
def pki(tmp_path) -> Pki:
    pki = Pki(tmp_path)
    pki.ca("ca")
    pki.signed("ca", "client", "extendedKeyUsage=clientAuth")
    return pki


def _form(**fields) -> dict[str, str]:
    return {
        "name": "remote",
        "driver": "docker",
        "base_url": "tcp://10.0.0.7:2376",
        "tls_ca_cert": "",
        "tls_client_cert": "",
        "tls_client_key": "",
        "labels": "{}",
        "enabled": "on",
        **fields,
    }


def test_plain_tcp_to_another_host_is_refused_and_nothing_is_saved(superuser):
    client = Client()
    client.force_login(superuser)
    response = client.post(ADD, _form())
    assert response.status_code == 200, response.status_code
    assert "is refused to any host but a loopback one" in response.content.decode()
    assert list(Runtime.objects.filter(name="remote").values("base_url")) == []


def test_a_tls_engine_is_saved_with_its_file_paths(superuser, pki):
    client = Client()
    client.force_login(superuser)
    files = {
        "tls_ca_cert": pki.cert("ca"),
        "tls_client_cert": pki.cert("client"),
        "tls_client_key": pki.key("client"),
    }
    response = client.post(ADD, _form(**files))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Runtime.objects.filter(name="remote").values(*files).first()
    assert row == files, row


def test_the_runtime_page_checks_the_engine_and_shows_why_it_does_not_answer(superuser, pki):
    runtime = Runtime.objects.create(
        name="closed",
        base_url="tcp://127.0.0.1:1",
        tls_ca_cert=pki.cert("ca"),
        tls_client_cert=pki.cert("client"),
        tls_client_key=pki.key("client"),
    )
    client = Client()
    client.force_login(superuser)
    page = client.get(f"/admin/containers/runtime/{runtime.pk}/change/").content.decode()
    row = Runtime.objects.filter(pk=runtime.pk).values("health", "last_error").first()
    assert row["health"] == "unreachable", row
    assert row["last_error"].startswith("connection refused at 127.0.0.1:1: nothing listens"), row
    assert "connection refused at 127.0.0.1:1: nothing listens there" in page, row
