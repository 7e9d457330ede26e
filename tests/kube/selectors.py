"""Label and field selectors, parsed as the API server parses ``labelSelector`` and
``fieldSelector``: equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence
(``key``, ``!key``) for labels; ``=``/``==``/``!=`` on a per-resource list of fields."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.kube.status import ApiError

Requirement = Callable[[dict[str, str]], bool]

_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")

# Fields each resource can be selected on (the API refuses any other with 400).
FIELDS = {
    "*": {"metadata.name", "metadata.namespace"},
    "pods": {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
    },
    "secrets": {"type"},
    "events": {
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
    },
}


def _split(selector: str) -> list[str]:
    """Split on the commas that are not inside ``( )``."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Requirement:
    if match := _SET.match(text):
        key, op, values = match.group(1), match.group(2), match.group(3)
        wanted = {v.strip() for v in values.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in wanted
        return lambda labels: labels.get(key) not in wanted
    if match := _EQ.match(text):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(text):
        negated, key = match.groups()
        if negated:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ApiError(400, f"unable to parse requirement: {text.strip()!r}")


def label_selector(selector: str | None) -> Requirement:
    """A predicate on an object's labels; an empty selector matches everything."""
    requirements = [_requirement(part) for part in _split(selector or "")]
    return lambda labels: all(r(labels) for r in requirements)


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_selector(resource: str, selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate on a whole object; fields the resource does not index answer 400."""
    allowed = FIELDS["*"] | FIELDS.get(resource, set())
    checks = []
    for part in _split(selector or ""):
        match = _EQ.match(part)
        if not match:
            raise ApiError(400, f"invalid field selector: {part.strip()!r}")
        path, op, value = match.groups()
        if path not in allowed:
            raise ApiError(400, f"field label not supported: {path}")
        checks.append((path, op == "!=", value))
    return lambda obj: all((_field(obj, p) == v) != negated for p, negated, v in checks)


def matches(
    obj: dict[str, Any] | None,
    labels: Requirement,
    fields: Callable[[dict[str, Any]], bool],
) -> bool:
    if obj is None:
        return False
    return labels(obj["metadata"].get("labels") or {}) and fields(obj)
