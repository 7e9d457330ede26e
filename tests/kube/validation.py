"""The checks the API server makes before it stores an object, answered as 422 Invalid with
the causes in ``details.causes`` (field, reason, message), as kube-apiserver does: names are
DNS-1123 (a label for namespaces, a subdomain for the rest), label keys and values are at
most 63 characters of the allowed alphabet, a Pod has containers with a name and an image,
a PersistentVolumeClaim has access modes and a storage request, and an update of a Pod
changes no field of its spec but the ones the API lets change (``pod_update``). The API's
other checks (probes, volumes, security contexts, ...) are not made."""

from __future__ import annotations

import re
from typing import Any

from tests.kube.quota import quantity
from tests.kube.status import ApiError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
RESTART_POLICIES = ("Always", "OnFailure", "Never")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")

Cause = tuple[str, str, str]  # field, reason, message


def _name(field: str, value: str, *, label: bool) -> list[Cause]:
    pattern, limit = (DNS1123_LABEL, 63) if label else (DNS1123_SUBDOMAIN, 253)
    if len(value) > limit:
        return [
            (
                field,
                "FieldValueInvalid",
                f'Invalid value: "{value}": must be no more than {limit} characters',
            )
        ]
    if not pattern.match(value):
        what = "RFC 1123 label" if label else "RFC 1123 subdomain"
        return [
            (
                field,
                "FieldValueInvalid",
                f'Invalid value: "{value}": a lowercase {what} must consist of lower case'
                " alphanumeric characters, '-' or '.', and must start and end with an"
                " alphanumeric character",
            )
        ]
    return []


def _labels(labels: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix:
            causes += _name("metadata.labels", prefix, label=False)
        if len(name) > 63 or not LABEL_NAME.match(name):
            causes.append(
                ("metadata.labels", "FieldValueInvalid", f'Invalid value: "{key}": name part'
                 " must consist of alphanumeric characters, '-', '_' or '.', at most 63")
            )  # fmt: skip
        if not isinstance(value, str):
            causes.append(("metadata.labels", "FieldValueInvalid", f"Invalid value: {value!r}"))
        elif value and (len(value) > 63 or not LABEL_NAME.match(value)):
            causes.append(
                ("metadata.labels", "FieldValueInvalid", f'Invalid value: "{value}": a valid'
                 " label must be an empty string or consist of alphanumeric characters, '-',"
                 " '_' or '.', and must start and end with an alphanumeric character; must be"
                 " no more than 63 characters")
            )  # fmt: skip
    return causes


def _pod(spec: dict[str, Any]) -> list[Cause]:
    containers = spec.get("containers") or []
    if not containers:
        return [("spec.containers", "FieldValueRequired", "Required value")]
    causes: list[Cause] = []
    seen = set()
    for i, container in enumerate(containers):
        field = f"spec.containers[{i}]"
        name = container.get("name") or ""
        if not name:
            causes.append((f"{field}.name", "FieldValueRequired", "Required value"))
        else:
            causes += _name(f"{field}.name", name, label=True)
        if name in seen:
            causes.append((f"{field}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
        seen.add(name)
        if not (container.get("image") or "").strip():
            causes.append((f"{field}.image", "FieldValueRequired", "Required value"))
        for kind in ("requests", "limits"):
            for key, value in ((container.get("resources") or {}).get(kind) or {}).items():
                try:
                    quantity(value)
                except ValueError as error:
                    causes.append((f"{field}.resources.{kind}[{key}]", "FieldValueInvalid",
                                   str(error)))  # fmt: skip
    policy = spec.get("restartPolicy", "Always")
    if policy not in RESTART_POLICIES:
        causes.append(
            ("spec.restartPolicy", "FieldValueNotSupported", f'Unsupported value: "{policy}"')
        )
    return causes


def _claim(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    modes = spec.get("accessModes") or []
    if not modes:
        causes.append(("spec.accessModes", "FieldValueRequired", "Required value"))
    for mode in modes:
        if mode not in ACCESS_MODES:
            causes.append(
                ("spec.accessModes", "FieldValueNotSupported", f'Unsupported value: "{mode}"')
            )
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        causes.append(("spec.resources[storage]", "FieldValueRequired", "Required value"))
    return causes


def _secret(obj: dict[str, Any]) -> list[Cause]:
    keys = list(obj.get("data") or {}) + list(obj.get("stringData") or {})
    return [
        ("data", "FieldValueInvalid", f'Invalid value: "{key}": a valid config key must'
         " consist of alphanumeric characters, '-', '_' or '.'")
        for key in keys if not SECRET_KEY.match(key)
    ]  # fmt: skip


def validate(kind: str, resource: str, obj: dict[str, Any]) -> None:
    """Raise 422 Invalid with every cause found in ``obj``, a ``kind`` (Pod, ...) object."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    causes = _name("metadata.name", name, label=resource == "namespaces")
    causes += _labels(meta.get("labels") or {})
    if resource == "pods":
        causes += _pod(obj.get("spec") or {})
    elif resource == "persistentvolumeclaims":
        causes += _claim(obj.get("spec") or {})
    elif resource == "secrets":
        causes += _secret(obj)
    if causes:
        listed = [f"{field}: {message}" for field, _, message in causes]
        text = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
        raise ApiError(
            422,
            f'{kind} "{name}" is invalid: {text}',
            details={
                "name": name,
                "kind": kind,
                "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
            },
        )


def _mutable_masked(spec: dict[str, Any]) -> dict[str, Any]:
    """A Pod spec without the fields an update may change."""
    masked = {k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations")}
    masked["containers"] = [
        {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
    ]
    return masked


def pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """422 when an update of a Pod changes its spec other than the containers' images,
    ``activeDeadlineSeconds`` and ``tolerations`` (the API server's rule)."""
    if _mutable_masked(old.get("spec") or {}) != _mutable_masked(new.get("spec") or {}):
        name = old["metadata"]["name"]
        message = (
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            " `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing"
            " tolerations)"
        )
        raise ApiError(
            422,
            f'Pod "{name}" is invalid: spec: {message}',
            details={"name": name, "kind": "Pod", "causes": [
                {"reason": "FieldValueForbidden", "message": message, "field": "spec"}]},
        )  # fmt: skip
