"""The parts of a stored spec that depend on the engine, resolved when a create is placed.

A create is accepted before its engine is known (``containers.placement``): its spec is
resolved then with stand-ins for ``$RUNTIME_NAME`` and ``$WORKSPACE_PATH`` (and a
workspace mount of no kind yet), and ``spec_for_engine`` puts the chosen engine's values
in their place when the create leaves ``pending``. What the stand-ins may be: one path
segment each (an operator's bind source may use ``$RUNTIME_NAME``), nothing a template or
a runtime name could hold by chance.
"""

from __future__ import annotations

from typing import Any

RUNTIME_NAME_STANDIN = "@gobrave-runtime-name@"
WORKSPACE_PATH_STANDIN = "@gobrave-workspace-path@"


def _replaced(value: Any, table: dict[str, str]) -> Any:
    if isinstance(value, str):
        for standin, real in table.items():
            value = value.replace(standin, real)
        return value
    if isinstance(value, list):
        return [_replaced(each, table) for each in value]
    if isinstance(value, dict):
        return {key: _replaced(each, table) for key, each in value.items()}
    return value


def spec_placed(spec: dict[str, Any]) -> bool:
    """The spec's engine-dependent parts are resolved (it was placed, or it was stored
    before placement moved to the pending exit)."""
    return bool(spec.get("placement", {}).get("engine", True))


def spec_for_engine(
    spec: dict[str, Any], *, runtime_name: str, workspace: dict[str, Any]
) -> dict[str, Any]:
    """``spec`` with the engine's values in place of the stand-ins: ``$RUNTIME_NAME``
    everywhere, ``$WORKSPACE_PATH`` (the owner's ``workspace`` on that engine,
    ``containers.spec.mounts.workspace_for``) in env and command, and the workspace mount
    as that engine makes it (a named volume or a directory). Pure; idempotent on a spec
    already placed (nothing left to replace)."""
    table = {RUNTIME_NAME_STANDIN: runtime_name, WORKSPACE_PATH_STANDIN: workspace["source"]}
    placed = _replaced({k: v for k, v in spec.items() if k != "workspace"}, table)
    mounted = False
    for mount in placed.get("mounts", []):
        if mount.get("workspace"):
            mounted = True
            mount["source"] = workspace["source"]
            mount["type"] = "volume" if workspace["kind"] == "volume" else "bind"
    placed["workspace"] = dict(workspace) if mounted else None
    placed["placement"] = {**spec.get("placement", {}), "engine": runtime_name}
    return placed
