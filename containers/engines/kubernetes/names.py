"""Names and labels on Kubernetes objects.

Label values must be at most 63 characters of ``[A-Za-z0-9._-]``, beginning and ending
with an alphanumeric: ``label_value`` cleans a value to that (the same value always
cleans the same way; a value that had to change ends with a short hash of the original,
so two long values stay apart). The full values go in annotations under the same keys,
and ``labels_of`` reads them back from there.
"""

from __future__ import annotations

import hashlib
import re

from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE

_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")
LABEL_WORKSPACE_PREFIX = "ws.gobrave.io/"  # one label per mounted claim (pod affinity)
CONTAINER = "main"  # the one container of each Pod


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def label_value(value: str) -> str:
    """``value`` as a valid label value (see the module docstring)."""
    clean = _BAD.sub("-", value).strip("-._")
    if clean == value and len(value) <= 63:
        return value
    clean = clean[:54].strip("-._")
    return f"{clean}-{_hash(value)}" if clean else _hash(value)


def dns_name(value: str, *, limit: int = 63) -> str:
    """``value`` as a DNS-1123 label (Pod, Secret and claim names)."""
    clean = _NAME_BAD.sub("-", value.lower()).strip("-")
    if clean == value and len(value) <= limit:
        return value
    clean = clean[: limit - 9].strip("-")
    return f"{clean}-{_hash(value)}" if clean else f"gb-{_hash(value)}"


def secret_name(pod: str) -> str:
    """The Secret that holds a Pod's secret env values."""
    return dns_name(f"{pod}-env")


def claim_name(volume: str) -> str:
    """The PersistentVolumeClaim of a gobrave volume (an owner's workspace)."""
    return dns_name(volume)


def metadata(labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, annotations)`` for an object carrying gobrave's ``labels``."""
    return {k: label_value(v) for k, v in labels.items()}, dict(labels)


def labels_of(meta: dict) -> dict[str, str]:
    """gobrave's labels of an object, full values (from the annotations where they are)."""
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    return {k: annotations.get(k, v) for k, v in labels.items()}


def ours(meta: dict) -> bool:
    """Whether an object (its ``metadata``) is gobrave's: it carries gobrave's
    installation and instance labels. Its name holds the instance's id, so no two
    instances' objects share one; anything else holding one of our names (a foreign
    object a create refused) is never deleted by gobrave."""
    labels = meta.get("labels") or {}
    return bool(labels.get(LABEL_INSTALLATION)) and bool(labels.get(LABEL_INSTANCE))


def selector(installation: str, labels: dict[str, str] | None = None) -> str:
    """The label selector of our objects (and ``labels``), values cleaned as stored."""
    wanted = {LABEL_INSTALLATION: installation, **(labels or {})}
    return ",".join(f"{k}={label_value(v)}" for k, v in sorted(wanted.items()))
