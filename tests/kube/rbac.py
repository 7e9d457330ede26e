"""Does a Role allow what a client did? ``uncovered(calls, role)`` answers with the calls
(``Emulator.calls``) that the Role's rules do not grant, as the API server's RBAC
authorizer decides: a rule grants a call when its ``apiGroups``, ``resources`` (with the
subresource as ``pods/log``) and ``verbs`` each hold the call's (or ``*``), and its
``resourceNames``, if any, are not checked (the emulator does not record names). A Role is
namespaced: it grants nothing cluster-wide (a call whose namespace is "") and nothing in
another namespace than its own (when its ``metadata.namespace`` is set)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.kube.server import Call


def _holds(values: Iterable[str] | None, wanted: str) -> bool:
    values = list(values or [])
    return "*" in values or wanted in values


def grants(rule: dict[str, Any], call: Call) -> bool:
    resource = f"{call.resource}/{call.subresource}" if call.subresource else call.resource
    return (
        _holds(rule.get("apiGroups"), call.group)
        and _holds(rule.get("resources"), resource)
        and _holds(rule.get("verbs"), call.verb)
    )


def uncovered(calls: Iterable[Call], role: dict[str, Any]) -> list[Call]:
    """The distinct calls ``role`` (a Role manifest as a dict) does not grant, sorted."""
    namespace = (role.get("metadata") or {}).get("namespace")
    missing = set()
    for call in set(calls):
        in_scope = call.namespace != "" and namespace in (None, call.namespace)
        if not (in_scope and any(grants(rule, call) for rule in role.get("rules") or [])):
            missing.add(call)
    return sorted(missing, key=lambda c: (c.group, c.resource, c.subresource, c.verb, c.namespace))
