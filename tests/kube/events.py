"""Events about a Pod, as the scheduler (``default-scheduler``) and the kubelet write
them: ``Scheduled``, ``FailedScheduling``, ``Started``, ``Failed``, ``Killing``."""

from __future__ import annotations

import contextlib
from typing import Any

from tests.kube.status import ApiError
from tests.kube.store import Store, now


def record(
    store: Store,
    pod: dict[str, Any],
    node: str,
    type_: str,
    reason: str,
    message: str,
    source: str = "kubelet",
) -> None:
    """One Event (``type_`` Normal or Warning) about ``pod``, in its namespace."""
    meta = pod["metadata"]
    stamp = now()
    body = {
        "metadata": {"generateName": meta["name"] + "."},
        "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": meta["namespace"],
                           "name": meta["name"], "uid": meta.get("uid", "")},
        "type": type_, "reason": reason, "message": message, "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": source, "host": node},
        "reportingComponent": source, "reportingInstance": node,
    }  # fmt: skip
    with contextlib.suppress(ApiError):  # the namespace is going
        store.create("events", meta["namespace"], body)
