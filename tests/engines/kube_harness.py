"""The contract suite's ``Harness`` for the Kubernetes driver, on ``kube_cluster`` (the
emulator and fake kubelet of ``tests/kube``): programs are kubelet rules, a foreign
object is a Pod made with the bare client, an unreachable API is a kubeconfig whose
server is a closed loopback port.

On a real cluster (``GOBRAVE_KUBE_REAL=1``, docs/kubernetes.md) the cluster's kubelet runs
each spec's command itself (no rule to set: ``before_start`` does nothing), in an image
its nodes can pull: ``GOBRAVE_TEST_KUBE_IMAGE`` (default ``busybox:1.36``), pulled if not
present (the suite's locally built image exists on no node)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from containers.engines.base import ContainerSpec, Engine
from containers.engines.kubernetes import KubernetesEngine, KubeTarget

WATCH_SECONDS = 1  # the tests' watch streams end soon (the monitor reopens them)
REAL_IMAGE = "busybox:1.36"  # a real cluster's image unless GOBRAVE_TEST_KUBE_IMAGE says


def real_cluster_image() -> str:
    """The image the contract suite runs on a real cluster (any image with ``sh``,
    ``sleep`` and ``echo``; the nodes pull it)."""
    return os.environ.get("GOBRAVE_TEST_KUBE_IMAGE") or REAL_IMAGE


def engine_for_cluster(cluster: Any, **target: Any) -> KubernetesEngine:
    return KubernetesEngine(
        KubeTarget(
            namespace=cluster.namespace,
            kubeconfig=cluster.kubeconfig_path,
            context=cluster.context,
            **target,
        ),
        timeout=10,
        watch_seconds=WATCH_SECONDS,
    )


def closed_port_kubeconfig(cluster: Any) -> str:
    """A copy of the cluster's kubeconfig whose server is 127.0.0.1:9 (nothing listens)."""
    source = Path(cluster.kubeconfig_path)
    config = yaml.safe_load(source.read_text())
    for entry in config.get("clusters") or []:
        entry["cluster"]["server"] = "https://127.0.0.1:9"
    path = source.with_name("kubeconfig-closed")
    path.write_text(yaml.safe_dump(config))
    return str(path)


def harness_for(cluster: Any, harness_class: type) -> Any:
    engine = engine_for_cluster(cluster)

    def before_start(spec: ContainerSpec, program: str) -> None:
        if cluster.real:
            return  # the cluster's kubelet runs the spec's command itself
        if program.startswith("exit"):
            cluster.kubelet.add_rule(name=spec.name, exit_code=int(program.removeprefix("exit")))
        else:
            # What metrics-server would report: a CPU loop near a core, a sleeper nothing.
            cpu = "950m" if program == "busy" else "1m"
            cluster.kubelet.add_rule(
                name=spec.name, logs=["hello contract"], usage={"cpu": cpu, "memory": "8Mi"}
            )

    def foreign(name: str) -> None:
        from kubernetes import client

        with cluster.api_client() as api_client:
            client.CoreV1Api(api_client).create_namespaced_pod(
                cluster.namespace,
                {
                    "metadata": {"name": name},
                    "spec": {"containers": [{"name": "main", "image": "someone/else"}]},
                },
            )

    def unforeign(name: str) -> None:
        from kubernetes import client

        with cluster.api_client() as api_client:
            client.CoreV1Api(api_client).delete_namespaced_pod(
                name, cluster.namespace, grace_period_seconds=0
            )

    def unreachable() -> Engine:
        return KubernetesEngine(
            KubeTarget(
                namespace=cluster.namespace,
                kubeconfig=closed_port_kubeconfig(cluster),
                context=cluster.context,
            ),
            timeout=2,
        )

    def workspace(name: str) -> str | None:
        """The uid of the workspace's claim; None when there is none, or it is being
        deleted (a cluster's protection finalizer holds it until no Pod uses it)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        from containers.engines.kubernetes import names

        with cluster.api_client() as api_client:
            try:
                claim = client.CoreV1Api(api_client).read_namespaced_persistent_volume_claim(
                    names.claim_name(name), cluster.namespace
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
        return None if claim.metadata.deletion_timestamp else claim.metadata.uid

    image = {"image": real_cluster_image(), "pull_policy": "if_not_present"}
    return harness_class(
        **(image if cluster.real else {}),
        driver="kubernetes",
        engine=engine,
        before_start=before_start,
        foreign=foreign,
        unforeign=unforeign,
        unreachable=unreachable,
        workspace=workspace,
    )
