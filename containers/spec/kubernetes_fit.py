"""What a template may not ask of a Kubernetes runtime (Pod Security "restricted"),
checked when the template is written, not when a create fails in a worker.

A template is checked when it could be placed on a runtime of driver ``kubernetes``
(its constraints match that runtime's labels): its containers must run as a non-root
user gobrave chooses (the owner, or a fixed uid other than 0: not the image's user), add
no capability but ``NET_BIND_SERVICE``, mount no host path (only the owner's
workspace, a claim), and ask for no network of their own (``none`` or the owner's: a
Pod has the cluster's network, which the NetworkPolicy restricts). The worker checks
the resolved spec again (``containers.engines.kubernetes.pods.refusals``). Pure but for
one read of the runtimes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from containers.models import Runtime
from containers.spec.resolve import clean_constraints, labels_match
from core.config import container_user

ALLOWED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
WORKSPACE_SOURCES = ("$WORKSPACE_PATH", "${WORKSPACE_PATH}")


def kubernetes_problems(
    *, security: Mapping[str, Any], volumes: list[Mapping[str, Any]], config: Mapping[str, Any]
) -> list[str]:
    """Why a template with these fields cannot run on Kubernetes (empty: it can)."""
    problems = []
    user = container_user(security.get("user", config["user"]))
    if user == "image":
        problems.append("security.user: the image's user is refused on Kubernetes (runAsNonRoot)")
    elif user == 0 or (isinstance(user, tuple) and user[0] == 0):
        problems.append("security.user: root is refused on Kubernetes")
    extra = sorted(set(security.get("cap_add") or ()) - ALLOWED_CAPABILITIES)
    if extra:
        problems.append(
            f"security.cap_add: {', '.join(extra)} refused on Kubernetes"
            " (only NET_BIND_SERVICE is allowed)"
        )
    network = security.get("network", config["network"])
    if network in ("none", "owner"):
        problems.append(
            f"security.network: {network} is refused on Kubernetes (a Pod is always on the "
            "cluster's network; its NetworkPolicy isolates users' Pods: use bridge)"
        )
    hosts = [v.get("source", "") for v in volumes or () if v.get("source") not in WORKSPACE_SOURCES]
    if hosts:
        problems.append("volumes: host paths are refused on Kubernetes (only $WORKSPACE_PATH)")
    return problems


def kubernetes_runtimes_for(constraints: Mapping[str, str]) -> list[str]:
    """Names of the ``kubernetes`` runtimes whose labels satisfy ``constraints`` (those
    prefixed ``node.`` are the cluster's to match)."""
    wanted = clean_constraints(constraints)
    return [
        runtime.name
        for runtime in Runtime.objects.filter(driver=Runtime.Driver.KUBERNETES)
        if labels_match(runtime, wanted)
    ]
