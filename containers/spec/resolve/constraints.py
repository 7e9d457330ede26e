"""A template's constraints: checked (``clean_constraints``), its ``node.`` ones made a
node selector, and matched against a runtime's labels (``labels_match``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from containers.engines import driver_class
from containers.errors import InvalidSpec

# Constraints with this prefix are the cluster's to match (a Kubernetes ``nodeSelector``),
# not runtime labels; only engines that honour them take such a template.
NODE_CONSTRAINT_PREFIX = "node."


def node_selector(constraints: dict[str, str]) -> dict[str, str]:
    """The ``node.`` constraints without their prefix (``node.disktype: ssd`` ->
    ``disktype: ssd``): the engine's node selection."""
    return {
        key.removeprefix(NODE_CONSTRAINT_PREFIX): value
        for key, value in constraints.items()
        if key.startswith(NODE_CONSTRAINT_PREFIX)
    }


def clean_constraints(constraints: Any) -> dict[str, str]:
    if constraints in (None, ""):
        return {}
    if not isinstance(constraints, dict):
        raise InvalidSpec(
            'constraints: must map label names to values such as {"zone": "eu-1"}',
            field="constraints",
        )
    for key, value in constraints.items():
        if not key:
            raise InvalidSpec("constraints: a label name is empty", field="constraints")
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise InvalidSpec(
                f"constraints.{key[:64]}: must be a text or number value", field="constraints"
            )
    return {k: str(v) for k, v in constraints.items()}


def labels_match(runtime: Any, constraints: Mapping[str, str]) -> bool:
    """The runtime's labels satisfy every constraint (``key: value``). ``node.``
    constraints are the cluster's to match (a nodeSelector), not labels: only a driver
    that honours them takes such a template (a Docker engine cannot)."""
    on_nodes = False
    for key, value in constraints.items():
        if key.startswith(NODE_CONSTRAINT_PREFIX):
            on_nodes = True
        elif str(runtime.labels.get(key)) != value:
            return False
    return not on_nodes or driver_class(runtime.driver).honours_node_constraints
