"""How a Kubernetes runtime reaches its API (``containers/engines/kubernetes/config.py``):
the in-cluster service account (token and CA, the API's address from the environment),
a kubeconfig that turns verification off (refused), and one whose CA did not sign the
server's certificate (the runtime's health says so in an operator's words).

On ``kube``: the API emulator of ``tests/kube``, over HTTPS with a CA of its own and a
bearer token, standing in for the cluster (gobrave's Pod is not in one here).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from containers.engines.base import EngineError
from containers.engines.kubernetes import KubernetesEngine, KubeTarget
from containers.engines.kubernetes import config as kube_config
from tests.kube.rbac import Call
from tests.pki import Pki


@pytest.fixture
def in_cluster(kube, monkeypatch, tmp_path):
    """The environment of a Pod with a service account: KUBERNETES_SERVICE_HOST/PORT set,
    the token and CA mounted (here: files made for the emulator). Returns the token's
    path."""
    url = urlsplit(kube.emulator.url)
    token = tmp_path / "token"
    token.write_text(kube.emulator.token)
    ca = tmp_path / "ca.crt"
    ca.write_bytes(Path(kube.emulator.ca_path).read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", url.hostname)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(url.port))
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_TOKEN", str(token))
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT_CA", str(ca))
    return token


def kubeconfig_changed(kube, tmp_path: Path, name: str, **cluster) -> str:
    """A copy of the emulator's kubeconfig with ``cluster`` merged into its cluster entry
    (a key given None is dropped)."""
    config = yaml.safe_load(Path(kube.kubeconfig_path).read_text())
    for entry in config["clusters"]:
        entry["cluster"].update(cluster)
        entry["cluster"] = {k: v for k, v in entry["cluster"].items() if v is not None}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_in_cluster_service_account_reaches_the_api_with_its_token_and_ca(kube, in_cluster):
    engine = KubernetesEngine(KubeTarget(namespace=kube.namespace), timeout=10)
    engine.check()
    assert kube.emulator.calls == [Call("list", "pods", "", kube.namespace, "")], (
        kube.emulator.calls
    )


def test_an_in_cluster_token_the_api_refuses_says_so_without_showing_it(kube, in_cluster):
    in_cluster.write_text("not-the-token-9f3c")
    engine = KubernetesEngine(KubeTarget(namespace=kube.namespace), timeout=10)
    with pytest.raises(EngineError) as raised:
        engine.check()
    reason = str(raised.value)
    assert "HTTP 401" in reason and "refused gobrave's credentials" in reason, reason
    assert "in-cluster service account" in reason, reason
    assert "not-the-token-9f3c" not in reason and kube.emulator.token not in reason


def test_outside_a_pod_the_in_cluster_configuration_cannot_be_loaded(kube, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(EngineError) as raised:
        kube_config.api_client(KubeTarget(namespace=kube.namespace), timeout=5)
    reason = str(raised.value)
    assert reason.startswith(
        f"cannot load the Kubernetes configuration of namespace {kube.namespace} "
        "(in-cluster service account): "
    ), reason


def test_a_kubeconfig_that_skips_tls_verification_is_refused_before_any_call(kube, tmp_path):
    path = kubeconfig_changed(kube, tmp_path, "insecure", **{"insecure-skip-tls-verify": True})
    engine = KubernetesEngine(
        KubeTarget(namespace=kube.namespace, kubeconfig=path, context=kube.context), timeout=5
    )
    with pytest.raises(EngineError) as raised:
        engine.check()
    reason = str(raised.value)
    assert "turns certificate verification off (insecure-skip-tls-verify)" in reason, reason
    assert "gobrave always verifies: give the cluster's CA" in reason, reason
    assert f"kubeconfig {path}" in reason, reason
    assert kube.emulator.calls == []  # refused before anything was sent


@pytest.mark.django_db
def test_a_kubeconfig_with_a_foreign_ca_gives_the_runtime_a_health_reason_about_the_ca(
    kube, tmp_path
):
    from containers.execution.health import runtime_health_check
    from containers.models import Runtime

    foreign = Pki(tmp_path).ca("foreign-ca")
    data = base64.b64encode(Path(foreign).read_bytes()).decode()
    path = kubeconfig_changed(kube, tmp_path, "foreign", **{"certificate-authority-data": data})
    runtime = Runtime(
        name="kube-foreign-ca",
        driver=Runtime.Driver.KUBERNETES,
        kube_namespace=kube.namespace,
        kube_config=path,
        kube_context=kube.context,
    )
    runtime.full_clean()
    runtime.save()
    assert runtime_health_check(runtime=runtime, seconds=5) is False
    runtime.refresh_from_db()
    assert runtime.health == Runtime.Health.UNREACHABLE, (runtime.health, runtime.last_error)
    assert "its certificate was not accepted (check the kubeconfig's CA)" in runtime.last_error, (
        runtime.last_error
    )
    assert "did not answer" in runtime.last_error and path in runtime.last_error, runtime.last_error
    assert kube.emulator.calls == []


def _target(kube, kubeconfig: str) -> KubeTarget:
    return KubeTarget(namespace=kube.namespace, kubeconfig=kubeconfig, context=kube.context)


def test_a_kubeconfig_token_that_never_changes_is_not_renewed_before_every_call(kube):
    """The client's renewal hook runs before every request; for a token in the kubeconfig
    it would only set the same token again, so it is dropped, and the token still goes."""
    api = kube_config.api_client(_target(kube, kube.kubeconfig_path), timeout=5)
    assert api.configuration.refresh_api_key_hook is None
    KubernetesEngine(_target(kube, kube.kubeconfig_path), timeout=10).check()
    assert [c.verb for c in kube.emulator.calls] == ["list"], kube.emulator.calls


def test_an_exec_plugins_credentials_keep_the_clients_renewal(kube, tmp_path):
    """An exec plugin's token expires: the client's hook, which runs the plugin again
    once it has, stays."""
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": kube.emulator.token, "expirationTimestamp": "2999-01-01T00:00:00Z"},
    }
    config = yaml.safe_load(Path(kube.kubeconfig_path).read_text())
    for entry in config["users"]:
        entry["user"] = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": sys.executable,
                "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
                "interactiveMode": "Never",
            }
        }
    path = tmp_path / "exec"
    path.write_text(yaml.safe_dump(config))
    api = kube_config.api_client(_target(kube, str(path)), timeout=5)
    assert api.configuration.refresh_api_key_hook is not None
    KubernetesEngine(_target(kube, str(path)), timeout=10).check()
    assert [c.verb for c in kube.emulator.calls] == ["list"], kube.emulator.calls
