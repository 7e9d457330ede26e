"""``ResourceQuota`` admission: a create that would pass a quota's ``spec.hard`` in its
namespace is refused with 403 "exceeded quota", as the API server's quota admission plugin
does. Counted: ``pods``, ``secrets``, ``persistentvolumeclaims`` (also as ``count/<r>``),
``requests.cpu``/``cpu``, ``requests.memory``/``memory``, ``limits.cpu``, ``limits.memory``,
``requests.storage``. Pods in phase Succeeded or Failed do not count, as on a cluster.
``status.used`` is not maintained (no quota controller runs)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from tests.kube.status import ApiError

_SUFFIX = {
    "m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3), "M": Fraction(10**6),
    "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:[eE]([+-]?[0-9]+))?([a-zA-Z]*)$")

# Compute resources: quota key -> (requests or limits, resource name).
_COMPUTE = {
    "requests.cpu": ("requests", "cpu"),
    "cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
}
_COUNTED = {"pods", "secrets", "persistentvolumeclaims"}


def quantity(text: str | int | float) -> Fraction:
    """A Kubernetes quantity (``500m``, ``1.5``, ``128Mi``, ``1e3``) as an exact number."""
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(3) not in _SUFFIX:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number = Fraction(match.group(1)) * _SUFFIX[match.group(3)]
    return number * Fraction(10) ** int(match.group(2) or 0)


def _show(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{int(value * 1000)}m"


def _usage(resource: str, obj: dict[str, Any], key: str, qname: str) -> Fraction | None:
    """What ``obj`` takes of quota ``key``; None when the key does not apply to it."""
    if key in _COUNTED or key.startswith("count/"):
        return Fraction(1) if key.removeprefix("count/") == resource else None
    if resource == "pods" and key in _COMPUTE:
        kind, name = _COMPUTE[key]
        total = Fraction(0)
        for container in obj.get("spec", {}).get("containers") or []:
            value = ((container.get("resources") or {}).get(kind) or {}).get(name)
            if value is None:
                raise ApiError(
                    403,
                    f'pods "{obj["metadata"]["name"]}" is forbidden: failed quota: '
                    f"{qname}: must specify {key}",
                )
            total += quantity(value)
        return total
    if resource == "persistentvolumeclaims" and key == "requests.storage":
        return quantity(obj["spec"]["resources"]["requests"]["storage"])
    return None


def _taken(resource: str, obj: dict[str, Any], key: str, qname: str) -> Fraction:
    """What an existing object takes (one admitted before the quota may lack requests)."""
    try:
        return _usage(resource, obj, key, qname) or Fraction(0)
    except ApiError:
        return Fraction(0)


def _counts(resource: str, obj: dict[str, Any]) -> bool:
    return resource != "pods" or obj.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def admit(
    resource: str,
    obj: dict[str, Any],
    quotas: Iterable[dict[str, Any]],
    existing: Iterable[dict[str, Any]],
) -> None:
    """Raise 403 when creating ``obj`` would pass any quota's hard limit."""
    existing = [o for o in existing if _counts(resource, o)]
    name = obj["metadata"]["name"]
    for quota in quotas:
        qname = quota["metadata"]["name"]
        over, requested, used, limited = [], [], [], []
        for key, hard in sorted((quota.get("spec", {}).get("hard") or {}).items()):
            wanted = _usage(resource, obj, key, qname)
            if wanted is None:
                continue
            taken = sum((_taken(resource, o, key, qname) for o in existing), Fraction(0))
            requested.append(f"{key}={_show(wanted)}")
            used.append(f"{key}={_show(taken)}")
            limited.append(f"{key}={hard}")
            if taken + wanted > quantity(hard):
                over.append(key)
        if over:
            raise ApiError(
                403,
                f'{resource} "{name}" is forbidden: exceeded quota: {qname}, requested: '
                f"{','.join(requested)}, used: {','.join(used)}, limited: {','.join(limited)}",
            )
