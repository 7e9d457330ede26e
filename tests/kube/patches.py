"""PATCH bodies, by ``Content-Type`` as the API server reads them:
``application/merge-patch+json`` (RFC 7386: objects merge, ``null`` deletes a key, lists are
replaced whole) and ``application/strategic-merge-patch+json`` (the same, except that the
lists Kubernetes declares with a merge key, e.g. containers by ``name`` and conditions by
``type``, are merged item by item). JSON Patch (``application/json-patch+json``) answers 415;
``$patch`` directives are not read."""

from __future__ import annotations

import copy
from typing import Any

from tests.kube.status import ApiError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

# List fields merged by key under strategic merge (the Pod's, the ones a driver patches).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "containerStatuses": "name",
    "tolerations": "key",
    "imagePullSecrets": "name",
}


def _merge(target: Any, patch: Any, *, strategic: bool, key: str | None = None) -> Any:
    if isinstance(patch, dict):
        result = copy.deepcopy(target) if isinstance(target, dict) else {}
        for field, value in patch.items():
            if value is None:
                result.pop(field, None)
            else:
                result[field] = _merge(result.get(field), value, strategic=strategic, key=field)
        return result
    if strategic and isinstance(patch, list) and key in MERGE_KEYS and isinstance(target, list):
        merge_key = MERGE_KEYS[key]
        result = copy.deepcopy(target)
        for item in patch:
            for i, old in enumerate(result):
                if isinstance(item, dict) and old.get(merge_key) == item.get(merge_key):
                    result[i] = _merge(old, item, strategic=True)
                    break
            else:
                result.append(copy.deepcopy(item))
        return result
    return copy.deepcopy(patch)


def apply(target: dict[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    """``target`` patched (a new object); 415 for a patch type not served, 400 for a body
    that is not an object."""
    kind = content_type.split(";")[0].strip()
    if kind not in (MERGE, STRATEGIC):
        raise ApiError(415, f"the body of the request was in an unknown format - accepted media"
                       f" types include: {MERGE}, {STRATEGIC}")  # fmt: skip
    if not isinstance(patch, dict):
        raise ApiError(400, "the patch must be a JSON object")
    return _merge(target, patch, strategic=kind == STRATEGIC)
