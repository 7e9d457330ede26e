"""Runtimes through the API (staff): added with ``add_runtime``, changed with
``change_runtime``; how to reach the engine is checked (``containers.addresses``) and a
refusal is a 400 ``invalid_runtime`` naming each field, with nothing saved."""

from __future__ import annotations

import pytest

from containers.models import Runtime
from tests.api.helpers import assert_error, token_client
from tests.factories import UserFactory
from tests.pki import Pki

pytestmark = pytest.mark.django_db


@pytest.fixture
def root():
    return token_client(UserFactory(username="root", is_staff=True, is_superuser=True))


@pytest.fixture
def pki(tmp_path) -> Pki:
    pki = Pki(tmp_path)
    pki.ca("ca")
    pki.signed("ca", "client", "extendedKeyUsage=clientAuth")
    return pki


def _files(pki: Pki) -> dict[str, str]:
    return {
        "tls_ca_cert": pki.cert("ca"),
        "tls_client_cert": pki.cert("client"),
        "tls_client_key": pki.key("client"),
    }


def test_a_tls_engine_is_added_and_its_paths_shown(root, pki):
    body = {"name": "engine-3", "base_url": "tcp://10.0.3.7:2376", **_files(pki)}
    response = root.post("/api/runtimes/", body, format="json")
    assert response.status_code == 201, response.content
    shown = response.json()
    assert {k: shown[k] for k in body} == body, shown
    row = Runtime.objects.filter(name="engine-3").values("base_url", *_files(pki)).first()
    assert row == {k: body[k] for k in row}, row


def test_plain_tcp_to_another_host_is_a_400_naming_the_field_and_saves_nothing(root):
    response = root.post(
        "/api/runtimes/", {"name": "open", "base_url": "tcp://10.0.3.7:2375"}, format="json"
    )
    error = assert_error(response, 400, "invalid_runtime")
    assert list(error["details"]["fields"]) == ["base_url"], error
    assert "refused to any host but a loopback one" in error["details"]["fields"]["base_url"]
    assert list(Runtime.objects.filter(name="open").values("base_url")) == []


def test_a_change_that_drops_a_tls_file_is_refused_and_changes_nothing(root, pki):
    runtime = Runtime.objects.create(name="engine-3", base_url="tcp://10.0.3.7:2376", **_files(pki))
    response = root.patch(
        f"/api/runtimes/{runtime.pk}/", {"tls_client_key": "", "labels": {"a": "b"}}, format="json"
    )
    error = assert_error(response, 400, "invalid_runtime")
    assert list(error["details"]["fields"]) == ["tls_client_key"], error
    row = Runtime.objects.filter(pk=runtime.pk).values("tls_client_key", "labels").first()
    assert row == {"tls_client_key": pki.key("client"), "labels": {}}, row


def test_a_change_to_ssh_is_saved(root, pki):
    runtime = Runtime.objects.create(name="engine-3", base_url="tcp://10.0.3.7:2376", **_files(pki))
    change = {"base_url": "ssh://deploy@engine-3:2222", **dict.fromkeys(_files(pki), "")}
    response = root.patch(f"/api/runtimes/{runtime.pk}/", change, format="json")
    assert response.status_code == 200, response.content
    row = Runtime.objects.filter(pk=runtime.pk).values(*change).first()
    assert row == change, row


def test_an_operator_without_add_runtime_may_not_add_one(staff_user):
    response = token_client(staff_user).post(
        "/api/runtimes/", {"name": "x", "base_url": "unix:///var/run/docker.sock"}, format="json"
    )
    assert_error(response, 403)
    assert not Runtime.objects.filter(name="x").exists()


def test_the_api_writes_exactly_the_fields_the_admin_form_writes():
    """Both sides take their list from ``containers.fleet.runtimes.WRITABLE`` or say it
    again; this keeps the API's declared fields from drifting from it."""
    from containers.api import serializers as s
    from containers.fleet import runtimes

    assert set(s.RuntimeInputSerializer().fields) == set(runtimes.WRITABLE)


def test_a_kubernetes_runtime_is_added_with_its_namespace_and_kubeconfig_path(root, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    body = {
        "name": "cluster-1",
        "driver": "kubernetes",
        "kube_namespace": "users",
        "kube_config": str(kubeconfig),
        "kube_context": "prod",
        "kube_access_mode": "ReadWriteMany",
    }
    response = root.post("/api/runtimes/", body, format="json")
    assert response.status_code == 201, response.content
    shown = response.json()
    assert {k: shown[k] for k in body} == body, shown
    assert shown["base_url"] == "kubernetes://prod/users"  # derived: one engine per namespace
    assert shown["kube_volume_size"] == "1Gi"


def test_a_kubernetes_runtime_without_a_namespace_is_a_400_and_saves_nothing(root):
    body = {"name": "cluster-2", "driver": "kubernetes", "kube_config": "relative/kubeconfig"}
    response = root.post("/api/runtimes/", body, format="json")
    error = assert_error(response, 400, "invalid_runtime")
    assert set(error["details"]["fields"]) == {"kube_namespace", "kube_config"}, error
    assert not Runtime.objects.filter(name="cluster-2").exists()


def test_a_capacity_is_set_changed_refused_below_one_and_emptied(root):
    body = {"name": "sized", "base_url": "unix:///var/run/docker.sock", "max_containers": 3}
    created = root.post("/api/runtimes/", body, format="json")
    assert created.status_code == 201, created.content
    shown = created.json()
    assert (shown["max_containers"], shown["max_concurrency"]) == (3, None), shown
    url = f"/api/runtimes/{shown['id']}/"
    for bad in ({"max_containers": 0}, {"max_concurrency": -1}, {"max_containers": "x"}):
        response = root.patch(url, bad, format="json")
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert set(error["details"]) == set(bad), error
    row = Runtime.objects.filter(name="sized").values("max_containers", "max_concurrency").get()
    assert row == {"max_containers": 3, "max_concurrency": None}, row
    changed = root.patch(url, {"max_containers": None, "max_concurrency": 2}, format="json")
    assert changed.status_code == 200, changed.content
    row = Runtime.objects.filter(name="sized").values("max_containers", "max_concurrency").get()
    assert row == {"max_containers": None, "max_concurrency": 2}, row


def test_a_kubernetes_runtime_templates_that_kubernetes_refuses_could_go_to_is_a_400(
    root, tmp_path
):
    """The other half of the template check: a template written for Docker (root) must
    not become placeable on a Kubernetes runtime added or relabelled later."""
    from containers.models import ContainerTemplate

    ContainerTemplate.objects.create(
        name="as-root", image="busybox", constraints={"gpu": "yes"}, security={"user": 0}
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    body = {
        "name": "cluster-3",
        "driver": "kubernetes",
        "kube_namespace": "users",
        "kube_config": str(kubeconfig),
        "labels": {"gpu": "yes"},
    }
    error = assert_error(root.post("/api/runtimes/", body, format="json"), 400, "invalid_runtime")
    assert "as-root: security.user: root is refused" in error["details"]["fields"]["labels"], error
    assert not Runtime.objects.filter(name="cluster-3").exists()

    body["labels"] = {"gpu": "no"}
    created = root.post("/api/runtimes/", body, format="json")
    assert created.status_code == 201, created.content
    url = f"/api/runtimes/{created.json()['id']}/"
    error = assert_error(root.patch(url, {"labels": {"gpu": "yes"}}, format="json"), 400)
    assert "as-root" in error["message"], error
    assert Runtime.objects.get(name="cluster-3").labels == {"gpu": "no"}
    # Another change of a runtime that fits goes through.
    assert root.patch(url, {"max_containers": 4}, format="json").status_code == 200
