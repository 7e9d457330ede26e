"""pytest fixtures for tests that talk to Kubernetes (registered in ``tests/conftest.py``).

``kube_cluster`` (one per module): the emulator and the fake kubelet running, a namespace
made, a kubeconfig written; or, when ``GOBRAVE_KUBE_REAL=1`` and ``KUBECONFIG`` are set, a
real cluster's throwaway namespace (``kube_cluster.emulator`` and ``.kubelet`` then skip the
test that asks for them: the fake kubelet's rules have no real counterpart). ``kube`` (one
per test): the same cluster, its namespace emptied and its rules, quotas, history limit and
recorded calls forgotten, its Pod Security level lifted.

Every test that uses them is marked ``kube_real``: ``-m kube_real`` selects the suite that
an opt-in run sends to a real cluster (docs/kubernetes.md, "How the driver is tested")."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.kube import podsecurity

if TYPE_CHECKING:  # imported when a test asks for the cluster: every session loads this
    from tests.kube.emulator import Emulator
    from tests.kube.kubelet import FakeKubelet

REAL = os.environ.get("GOBRAVE_KUBE_REAL") == "1" and bool(os.environ.get("KUBECONFIG"))
NAMESPACE = "gobrave-test"
KUBE_FIXTURES = {"kube_cluster", "kube"}


@dataclass
class KubeCluster:
    """What a test needs to reach the cluster, and (emulated only) to steer it."""

    kubeconfig_path: str
    context: str
    namespace: str
    real: bool = False
    _emulator: Emulator | None = field(default=None, repr=False)
    _kubelet: FakeKubelet | None = field(default=None, repr=False)

    @property
    def emulator(self) -> Emulator:
        if self._emulator is None:
            pytest.skip("needs the Kubernetes emulator (this run is against a real cluster)")
        return self._emulator

    @property
    def kubelet(self) -> FakeKubelet:
        if self._kubelet is None:
            pytest.skip("needs the fake kubelet's rules (this run is against a real cluster)")
        return self._kubelet

    def api_client(self) -> Any:
        """The official client's ``ApiClient`` for this cluster (close it when done)."""
        from kubernetes import config

        return config.new_client_from_config(self.kubeconfig_path, context=self.context)

    def runtime_row(self, name: str = "kube", **fields: Any) -> Any:
        """A ``kubernetes`` ``Runtime`` row for this cluster (labels ``engine: kube``),
        checked and saved directly (not through the fleet services: never asked whether
        it serves metrics)."""
        from containers.models import Runtime

        runtime = Runtime(
            name=name,
            driver=Runtime.Driver.KUBERNETES,
            kube_namespace=self.namespace,
            kube_config=self.kubeconfig_path,
            kube_context=self.context,
            labels={"engine": "kube"},
            **fields,
        )
        runtime.full_clean()
        runtime.save()
        return runtime

    def enforce_pod_security(self, level: str = "restricted") -> None:
        """Label the namespace so that the API server's Pod Security admission enforces
        ``level`` (baseline or restricted) on its Pods, here and on a real cluster alike;
        ``reset`` lifts it."""
        from kubernetes import client

        with self.api_client() as api_client:
            client.CoreV1Api(api_client).patch_namespace(
                self.namespace, {"metadata": {"labels": {podsecurity.LABEL: level}}}
            )

    def reset(self) -> None:
        if self._emulator is not None and self._kubelet is not None:
            self._kubelet.reset()
            self._emulator.reset({self.namespace})
        else:
            _empty_real_namespace(self)


def _empty_real_namespace(cluster: KubeCluster) -> None:
    from kubernetes import client

    with cluster.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        ns = cluster.namespace
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        core.delete_collection_namespaced_secret(ns)
        core.delete_collection_namespaced_persistent_volume_claim(ns)
        core.delete_collection_namespaced_resource_quota(ns)
        core.delete_collection_namespaced_event(ns)
        core.patch_namespace(ns, {"metadata": {"labels": {podsecurity.LABEL: None}}})


def _real_cluster() -> Iterator[KubeCluster]:
    """A throwaway namespace on the cluster ``KUBECONFIG`` names, once its ``default``
    service account exists (a Pod made before it would be refused), deleted at the end."""
    from kubernetes import client, config, watch

    path = os.environ["KUBECONFIG"].split(os.pathsep)[0]
    context = (
        os.environ.get("GOBRAVE_KUBE_CONTEXT") or config.list_kube_config_contexts(path)[1]["name"]
    )
    cluster = KubeCluster(path, context, f"gobrave-test-{secrets.token_hex(4)}", real=True)
    with cluster.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespace({"metadata": {"name": cluster.namespace}})
        try:
            accounts = watch.Watch().stream(
                core.list_namespaced_service_account, cluster.namespace,
                field_selector="metadata.name=default", timeout_seconds=60,
            )  # fmt: skip
            if not any(event["type"] == "ADDED" for event in accounts):
                pytest.fail(f"no default service account in {cluster.namespace} after 60 s")
            yield cluster
        finally:
            core.delete_namespace(cluster.namespace)


@pytest.fixture(scope="module")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """The emulated cluster of this module (or a real one's namespace; see above)."""
    if REAL:
        yield from _real_cluster()
        return
    from tests.kube.emulator import Emulator
    from tests.kube.kubelet import FakeKubelet

    directory: Path = tmp_path_factory.mktemp("kube")
    emulator = Emulator(directory).start()
    kubelet = FakeKubelet(emulator.store).start()
    try:
        emulator.create_namespace(NAMESPACE)
        context = emulator.write_kubeconfig(directory / "kubeconfig", NAMESPACE)
        yield KubeCluster(str(directory / "kubeconfig"), context, NAMESPACE,
                          _emulator=emulator, _kubelet=kubelet)  # fmt: skip
    finally:
        kubelet.stop()
        emulator.stop()


@pytest.fixture
def kube(kube_cluster: KubeCluster) -> KubeCluster:
    """``kube_cluster`` emptied for this test."""
    kube_cluster.reset()
    return kube_cluster


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if KUBE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kube_real)
