"""Pod Security admission, as the API server runs it for a namespace labelled
``pod-security.kubernetes.io/enforce`` ``baseline`` or ``restricted``: a Pod that breaks
the level is refused with 403 and the reasons, in the API server's words
(``violates PodSecurity "restricted:latest": ...``). Checked: host namespaces, privileged
containers, host ports, hostPath volumes, an ``Unconfined`` seccomp profile (baseline);
and for restricted also the volume types, ``allowPrivilegeEscalation: false``,
``runAsNonRoot: true``, ``runAsUser`` not 0, a ``RuntimeDefault``/``Localhost`` seccomp
profile, capabilities dropping ``ALL`` and adding nothing but ``NET_BIND_SERVICE``.
Not checked: AppArmor, SELinux options, ``procMount``, sysctls, Windows host processes."""

from __future__ import annotations

from typing import Any

from tests.kube.status import ApiError

LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
SECCOMP = ("RuntimeDefault", "Localhost")


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _baseline(spec: dict[str, Any]) -> list[str]:
    found = []
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        found.append(f"host namespaces ({', '.join(hosts)})")
    for c in _containers(spec):
        context = c.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f'privileged (container "{c["name"]}" must not set'
                         " securityContext.privileged=true)")  # fmt: skip
        ports = [p["hostPort"] for p in c.get("ports") or [] if p.get("hostPort")]
        if ports:
            found.append(f'hostPort (container "{c["name"]}" uses hostPort {ports[0]})')
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f'seccompProfile (container "{c["name"]}" must not set'
                         ' securityContext.seccompProfile.type to "Unconfined")')  # fmt: skip
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f'hostPath volumes (volume "{volume["name"]}")')
    return found


def _restricted(spec: dict[str, Any]) -> list[str]:
    found = []
    pod = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        for kind in sorted(kinds - VOLUME_TYPES):
            found.append(f'restricted volume types (volume "{volume["name"]}" uses restricted'
                         f' volume type "{kind}")')  # fmt: skip
    not_false, not_root, no_seccomp, drop, added = [], [], [], [], []
    for c in _containers(spec):
        context, name = c.get("securityContext") or {}, c["name"]
        if context.get("allowPrivilegeEscalation") is not False:
            not_false.append(name)
        if not context.get("runAsNonRoot", pod.get("runAsNonRoot")):
            not_root.append(name)
        profile = context.get("seccompProfile") or pod.get("seccompProfile") or {}
        if profile.get("type") not in SECCOMP:
            no_seccomp.append(name)
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            drop.append(name)
        added += [(name, a) for a in capabilities.get("add") or [] if a != "NET_BIND_SERVICE"]
        if context.get("runAsUser", pod.get("runAsUser")) == 0:
            found.append(f'runAsUser=0 (container "{name}" must not set runAsUser=0)')
    if not_false:
        found.append(f"allowPrivilegeEscalation != false ({_which(not_false)} must set"
                     " securityContext.allowPrivilegeEscalation=false)")  # fmt: skip
    if drop or added:
        reasons = []
        if drop:
            reasons.append(f'{_which(drop)} must set securityContext.capabilities.drop=["ALL"]')
        for name, capability in added:
            reasons.append(f'container "{name}" must not include "{capability}" in'
                           " securityContext.capabilities.add")  # fmt: skip
        found.append(f"unrestricted capabilities ({'; '.join(reasons)})")
    if not_root:
        found.append(f"runAsNonRoot != true (pod or {_which(not_root)} must set"
                     " securityContext.runAsNonRoot=true)")  # fmt: skip
    if no_seccomp:
        found.append(
            f"seccompProfile (pod or {_which(no_seccomp)} must set securityContext."
            'seccompProfile.type to "RuntimeDefault" or "Localhost")'
        )
    return found


def _which(names: list[str]) -> str:
    quoted = ", ".join(f'"{n}"' for n in names)
    return f"container {quoted}" if len(names) == 1 else f"containers {quoted}"


def admit(level: str | None, pod: dict[str, Any]) -> None:
    """403 when ``pod`` breaks the namespace's enforced ``level`` (None: not enforced)."""
    if level not in ("baseline", "restricted"):
        return
    spec = pod.get("spec") or {}
    found = _baseline(spec) + (_restricted(spec) if level == "restricted" else [])
    if found:
        raise ApiError(
            403,
            f'pods "{pod["metadata"]["name"]}" is forbidden: violates PodSecurity'
            f' "{level}:latest": {", ".join(found)}',
        )
