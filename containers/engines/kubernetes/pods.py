"""A ``ContainerSpec`` as a Pod manifest (and the Secret of its secret env), and what
this driver refuses.

The mapping (docs/kubernetes.md, "Hardening mapping"): one Pod per instance named
``spec.name``, ``restartPolicy: Never``; the template's command is the container's
``args`` (it replaces the image's CMD, as on Docker); the Pod Security "restricted"
profile (``runAsNonRoot`` as the owner's uid and gid, ``fsGroup`` for the workspace,
``allowPrivilegeEscalation: false``, capabilities ``drop: [ALL]`` plus
``NET_BIND_SERVICE`` when the template adds it, ``seccompProfile: RuntimeDefault``,
``readOnlyRootFilesystem`` where asked, no service account token); tolerations for an
unreachable or not-ready node without ``tolerationSeconds`` (gobrave's health rule
decides, not the cluster's 300 s eviction). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from containers.engines.base import ContainerSpec, PermanentEngineError
from containers.engines.kubernetes import names

PULL_POLICIES = {"never": "Never", "if_not_present": "IfNotPresent", "always": "Always"}
ALLOWED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})  # what "restricted" permits
TOLERATED = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
NETWORKS = (None, "bridge")  # the Pod network; ``none`` and named networks have no Pod field


def _literal(text: str) -> str:
    """``text`` as Docker passes it: Kubernetes expands ``$(VAR)`` in args and env values
    and turns ``$$`` into ``$``, so every ``$`` is written doubled (it arrives as one)."""
    return text.replace("$", "$$")


def refusals(spec: ContainerSpec) -> list[str]:
    """What in ``spec`` this driver cannot run under Pod Security "restricted", in a
    user's words (empty: nothing). Templates are checked before any create
    (``containers.spec.kubernetes_fit``, which also refuses a template's added
    capabilities other than ``NET_BIND_SERVICE``); this is the worker's last check.
    Capabilities are not refused here: the configured set Docker keeps
    (``container.security.capabilities``) is dropped on a Pod, and only
    ``NET_BIND_SERVICE`` is added back when the spec has it."""
    problems = []
    uid, _gid = _ids(spec)
    if uid is None:
        problems.append("running as the image's user is refused on Kubernetes (runAsNonRoot)")
    elif uid == 0:
        problems.append("running as root is refused on Kubernetes")
    if any(m.type == "bind" for m in spec.mounts):
        problems.append("host paths (bind mounts) are refused on Kubernetes")
    if spec.network == "host":
        problems.append("the host's network is refused on Kubernetes")
    elif spec.network not in NETWORKS:
        problems.append(
            f"network {spec.network} is refused on Kubernetes (a Pod is on the cluster's network)"
        )
    return problems


def _ids(spec: ContainerSpec) -> tuple[int | None, int | None]:
    if not spec.user:
        return None, None
    uid, _, gid = spec.user.partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError:
        return None, None


def _quantity_cpu(cores: float) -> str:
    return f"{round(cores * 1000)}m"


def pod_manifest(spec: ContainerSpec, *, access_mode: str = "ReadWriteOnce") -> dict[str, Any]:
    """The Pod for ``spec`` (raises ``PermanentEngineError`` for what ``refusals`` finds)."""
    problems = refusals(spec)
    if problems:
        raise PermanentEngineError(f"create {spec.name}: " + "; ".join(problems))
    uid, gid = _ids(spec)
    secret = set(spec.secret_env)
    env = []
    for key, value in spec.env.items():
        if key in secret:
            ref = {"name": names.secret_name(spec.name), "key": key}
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
        else:
            env.append({"name": key, "value": _literal(str(value))})
    resources: dict[str, dict[str, str]] = {}
    if spec.cpu:
        resources.setdefault("requests", {})["cpu"] = _quantity_cpu(spec.cpu)
        resources.setdefault("limits", {})["cpu"] = _quantity_cpu(spec.cpu)
    if spec.memory:
        resources.setdefault("requests", {})["memory"] = str(spec.memory)
        resources.setdefault("limits", {})["memory"] = str(spec.memory)
    volumes, mounts, claims = [], [], []
    for index, mount in enumerate(spec.mounts):
        volume = f"v{index}"
        claim = names.claim_name(mount.source)
        claims.append(claim)
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": volume, "mountPath": mount.target, "readOnly": mount.read_only})
    if spec.read_only_rootfs:
        tmp: dict[str, Any] = {"medium": "Memory"}
        if spec.tmpfs_size:
            tmp["sizeLimit"] = str(spec.tmpfs_size)
        volumes.append({"name": "tmp", "emptyDir": tmp})
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
    labels, annotations = names.metadata(spec.labels)
    for claim in claims:
        labels[names.LABEL_WORKSPACE_PREFIX + claim] = "1"
    container: dict[str, Any] = {
        "name": names.CONTAINER,
        "image": spec.image,
        "imagePullPolicy": PULL_POLICIES.get(spec.pull_policy, "IfNotPresent"),
        "env": env,
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "runAsNonRoot": True,
            "capabilities": {
                "drop": ["ALL"],
                "add": sorted(set(spec.cap_add) & ALLOWED_CAPABILITIES),
            },
            "readOnlyRootFilesystem": bool(spec.read_only_rootfs),
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if spec.command:
        container["args"] = [_literal(arg) for arg in spec.command]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": gid,
            "fsGroup": gid,
            "supplementalGroups": sorted({int(g) for g in spec.group_add if str(g).isdigit()}),
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "tolerations": [
            {"key": key, "operator": "Exists", "effect": "NoExecute"} for key in TOLERATED
        ],
        "containers": [container],
        "volumes": volumes,
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.oci_runtime:
        pod_spec["runtimeClassName"] = spec.oci_runtime
    if claims and access_mode == "ReadWriteOnce":
        # Every Pod that mounts a claim goes where that claim's other Pods are.
        pod_spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchLabels": {names.LABEL_WORKSPACE_PREFIX + claim: "1"}
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                    for claim in claims
                ]
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": pod_spec,
    }


def secret_manifest(spec: ContainerSpec) -> dict[str, Any] | None:
    """The Secret holding ``spec``'s secret env values (None when it has none)."""
    values = {k: str(v) for k, v in spec.env.items() if k in set(spec.secret_env)}
    if not values:
        return None
    labels, annotations = names.metadata(spec.labels)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.secret_name(spec.name),
            "labels": labels,
            "annotations": annotations,
        },
        "stringData": values,
    }


def claim_manifest(
    name: str,
    *,
    labels: dict[str, str],
    size: str,
    access_mode: str,
    storage_class: str = "",
) -> dict[str, Any]:
    """The PersistentVolumeClaim of one owner's workspace."""
    clean, annotations = names.metadata(labels)
    spec: dict[str, Any] = {
        "accessModes": [access_mode],
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": clean, "annotations": annotations},
        "spec": spec,
    }
