"""``metrics.k8s.io/v1beta1`` PodMetrics, as metrics-server answers them: the usage the
fake kubelet reports for a running Pod (a rule's ``usage``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tests.kube import status
from tests.kube.store import Store


def pod_metrics(store: Store, namespace: str, name: str) -> dict[str, Any]:
    """One Pod's metrics; 404 for a Pod absent, not running or without a usage."""
    found = _pod_metrics(store, store.get("pods", namespace, name))
    if found is None:
        raise status.ApiError(404, f'podmetrics.metrics.k8s.io "{name}" not found')
    return found


def pod_metrics_list(
    store: Store, namespace: str | None, selected: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    items, _ = store.list("pods", namespace)
    found = [m for m in (_pod_metrics(store, p) for p in items if selected(p)) if m]
    return {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
            "items": found}  # fmt: skip


def _pod_metrics(store: Store, pod: dict[str, Any]) -> dict[str, Any] | None:
    usage = store.usage(pod["metadata"]["uid"])
    if usage is None or pod.get("status", {}).get("phase") != "Running":
        return None
    meta = pod["metadata"]
    return {
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                     "labels": meta.get("labels") or {},
                     "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "window": "10s",
        "containers": [{"name": c, "usage": u} for c, u in usage.items()],
    }  # fmt: skip
