"""What a Pod needs before it runs, read from the store as the scheduler and the kubelet
read it: its claims (the scheduler waits for them and binds them), the Secrets its
environment refers to (the kubelet waits for them), a node whose labels meet its
``nodeSelector``. Each check answers with the message a cluster gives, or None."""

from __future__ import annotations

import contextlib
from typing import Any

from tests.kube.status import ApiError
from tests.kube.store import Store

Pod = dict[str, Any]


def _claims(pod: Pod) -> list[str]:
    volumes = pod["spec"].get("volumes") or []
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in volumes
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]


def unmatched(node_labels: dict[str, str], pod: Pod) -> str | None:
    """The scheduler's message for a ``nodeSelector`` the node's labels do not meet."""
    wanted = pod["spec"].get("nodeSelector") or {}
    if all(node_labels.get(k) == v for k, v in wanted.items()):
        return None
    return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."


def missing_claim(store: Store, pod: Pod) -> str | None:
    """The scheduler's message for a claim that does not exist, if one does not."""
    for claim in _claims(pod):
        try:
            store.get("persistentvolumeclaims", pod["metadata"]["namespace"], claim)
        except ApiError:
            return f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found.'
    return None


def bind_claims(store: Store, pod: Pod) -> None:
    """Bind the Pod's Pending claims (a WaitForFirstConsumer class binds them when the
    first Pod using them is scheduled)."""

    def bind(pvc: dict[str, Any]) -> None:
        if pvc.get("status", {}).get("phase") == "Bound":
            return
        pvc["spec"]["volumeName"] = "pvc-" + pvc["metadata"]["uid"]
        pvc["status"] = {
            "phase": "Bound",
            "accessModes": pvc["spec"]["accessModes"],
            "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"]},
        }

    for claim in _claims(pod):
        with contextlib.suppress(ApiError):  # deleted meanwhile
            store.update("persistentvolumeclaims", pod["metadata"]["namespace"], claim, bind)


def missing_secret(store: Store, pod: Pod) -> str | None:
    """The kubelet's message for a Secret (or key) an env var needs and lacks."""
    ns = pod["metadata"]["namespace"]
    for container in pod["spec"]["containers"]:
        refs = [
            (e["valueFrom"]["secretKeyRef"], True)
            for e in container.get("env") or []
            if (e.get("valueFrom") or {}).get("secretKeyRef")
        ] + [(e["secretRef"], False) for e in container.get("envFrom") or [] if e.get("secretRef")]
        for ref, keyed in refs:
            if ref.get("optional"):
                continue
            try:
                secret = store.get("secrets", ns, ref["name"])
            except ApiError:
                return f'secret "{ref["name"]}" not found'
            if keyed and ref["key"] not in (secret.get("data") or {}):
                return f"couldn't find key {ref['key']} in Secret {ns}/{ref['name']}"
    return None
