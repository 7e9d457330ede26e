"""The parts of a stored spec that depend on the engine, resolved when a create is placed.

A create is accepted before its engine is known (``containers.placement``): its spec is
resolved then with stand-ins for ``$RUNTIME_NAME`` and ``$WORKSPACE_PATH`` (and a
workspace mount of no kind yet), and ``spec_for_engine`` puts the chosen engine's values
in their place when the create leaves ``pending``. What the stand-ins may be: one path
segment each (an operator's bind source may use ``$RUNTIME_NAME``), nothing a template or
a runtime name could hold by chance.

A create whose container never came to exist may be placed again elsewhere
(``containers.requests.placing``): ``spec_for_engine`` keeps where it put each value
(``placement["marks"]``: the string's path in the spec, and the offset and stand-in of
each value in it; offsets only, never the text around them, so a secret env value is
not copied anywhere a user's view of the spec would show it), and ``spec_unplaced``
puts the stand-ins back from them.
"""

from __future__ import annotations

import copy
import re
from typing import Any

RUNTIME_NAME_STANDIN = "@gobrave-runtime-name@"
WORKSPACE_PATH_STANDIN = "@gobrave-workspace-path@"

# The stand-ins by the one-letter code a mark records.
_CODES = {"r": RUNTIME_NAME_STANDIN, "w": WORKSPACE_PATH_STANDIN}
_BY_STANDIN = {standin: code for code, standin in _CODES.items()}
_STANDINS = re.compile("|".join(re.escape(each) for each in _CODES.values()))

Path = list  # keys and list indexes from the spec's top down to one string


def _replaced(value: Any, values: dict[str, str], path: Path, marks: list[list[Any]]) -> Any:
    """``value`` with every stand-in replaced by its engine value (``values``: by code),
    appending ``[path, [[offset, code], ...]]`` to ``marks`` for each string changed."""
    if isinstance(value, str):
        if not _STANDINS.search(value):
            return value
        out: list[str] = []
        spots: list[list[Any]] = []
        at = size = 0
        for match in _STANDINS.finditer(value):
            out.append(value[at : match.start()])
            size += match.start() - at
            code = _BY_STANDIN[match.group()]
            spots.append([size, code])
            out.append(values[code])
            size += len(values[code])
            at = match.end()
        out.append(value[at:])
        marks.append([path, spots])
        return "".join(out)
    if isinstance(value, list):
        return [_replaced(each, values, [*path, i], marks) for i, each in enumerate(value)]
    if isinstance(value, dict):
        return {key: _replaced(each, values, [*path, key], marks) for key, each in value.items()}
    return value


def spec_placed(spec: dict[str, Any]) -> bool:
    """The spec's engine-dependent parts are resolved (it was placed, or it was stored
    before placement moved to the pending exit)."""
    return bool(spec.get("placement", {}).get("engine", True))


def spec_replaceable(spec: dict[str, Any]) -> bool:
    """A placed spec whose stand-ins ``spec_unplaced`` can put back (placed since the
    marks are kept; a spec stored before, or never placed, has none)."""
    placement = spec.get("placement") or {}
    return bool(placement.get("engine")) and isinstance(placement.get("marks"), list)


def spec_for_engine(
    spec: dict[str, Any], *, runtime_name: str, workspace: dict[str, Any]
) -> dict[str, Any]:
    """``spec`` with the engine's values in place of the stand-ins: ``$RUNTIME_NAME``
    everywhere, ``$WORKSPACE_PATH`` (the owner's ``workspace`` on that engine,
    ``containers.spec.mounts.workspace_for``) in env and command, and the workspace mount
    as that engine makes it (a named volume or a directory). Where each value went is
    kept (``placement["marks"]``, with the workspace's source), for ``spec_unplaced``.
    Pure; idempotent on a spec already placed (nothing left to replace)."""
    values = {"r": runtime_name, "w": workspace["source"]}
    marks: list[list[Any]] = []
    rest = {k: v for k, v in spec.items() if k not in ("workspace", "placement")}
    placed = _replaced(rest, values, [], marks)
    mounted = False
    for mount in placed.get("mounts", []):
        if mount.get("workspace"):
            mounted = True
            mount["source"] = workspace["source"]
            mount["type"] = "volume" if workspace["kind"] == "volume" else "bind"
    placed["workspace"] = dict(workspace) if mounted else None
    placed["placement"] = {
        **spec.get("placement", {}),
        "engine": runtime_name,
        "workspace_path": workspace["source"],
        "marks": marks,
    }
    return placed


def _get(spec: Any, path: Path) -> Any:
    for step in path:
        spec = spec[step]
    return spec


def _put(spec: Any, path: Path, value: Any) -> None:
    _get(spec, path[:-1])[path[-1]] = value


def spec_unplaced(spec: dict[str, Any]) -> dict[str, Any] | None:
    """A placed ``spec`` as it was before placement: the stand-ins back where
    ``spec_for_engine`` put the engine's values, the workspace a stand-in again (its
    owner's uid and gid kept), ``placement["engine"]`` empty. None when that cannot be
    done exactly: no marks kept (``spec_replaceable``), or a marked string no longer holds
    the value at its offset. Pure."""
    if not spec_replaceable(spec):
        return None
    placement = dict(spec["placement"])
    values = {"r": placement["engine"], "w": placement.get("workspace_path", "")}
    unplaced = copy.deepcopy({k: v for k, v in spec.items() if k != "placement"})
    try:
        for path, spots in placement["marks"]:
            text = _get(unplaced, path)
            out, at = [], 0
            for offset, code in spots:
                if text[offset : offset + len(values[code])] != values[code]:
                    return None
                out += [text[at:offset], _CODES[code]]
                at = offset + len(values[code])
            out.append(text[at:])
            _put(unplaced, path, "".join(out))
    except (KeyError, IndexError, TypeError):
        return None
    workspace = unplaced.get("workspace")
    if isinstance(workspace, dict):
        unplaced["workspace"] = {
            "kind": "volume",
            "source": WORKSPACE_PATH_STANDIN,
            "uid": workspace.get("uid"),
            "gid": workspace.get("gid"),
        }
    for mount in unplaced.get("mounts", []):
        if mount.get("workspace"):
            mount["source"], mount["type"] = WORKSPACE_PATH_STANDIN, "volume"
    for key in ("workspace_path", "marks"):
        placement.pop(key, None)
    unplaced["placement"] = {**placement, "engine": ""}
    return unplaced
