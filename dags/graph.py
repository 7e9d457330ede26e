"""A DAG's nodes as data: validation, cycles, order. Pure (no database), unit-tested.

A node is ``{"key", "template", "command", "env", "depends_on", "retries"}``; only
``key`` and ``template`` are required; ``command`` is a list of words, as everywhere
(``containers.spec.resolve.clean_command``). ``template`` is a container template's name or
id here; the service resolves it and stores the id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from containers.errors import InvalidSpec
from containers.spec.resolve import clean_command, clean_env
from dags.errors import DagInvalid

MAX_NODES = 200
MAX_RETRIES = 10
NODE_FIELDS = frozenset({"key", "template", "command", "env", "depends_on", "retries"})
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def _refuse(message: str, **details: Any) -> DagInvalid:
    return DagInvalid(message, **details)


def clean_node(node: Any, index: int) -> dict[str, Any]:
    """One node normalized, or ``DagInvalid`` naming the node and the field."""
    where = f"nodes[{index}]"
    if not isinstance(node, Mapping):
        raise _refuse(f"{where}: must be an object with key and template", field=where)
    unknown = sorted(set(node) - NODE_FIELDS)
    if unknown:
        raise _refuse(f"{where}: unknown field {unknown[0]!r}", field=where)
    key = node.get("key")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise _refuse(
            f"{where}.key: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit",
            field=f"{where}.key",
        )
    where = f"node {key}"
    template = node.get("template")
    if isinstance(template, bool) or not isinstance(template, str | int) or template == "":
        raise _refuse(f"{where}: template must be a template's name or id", node=key)
    try:
        command = clean_command(node.get("command"))  # a list of words (None: the template's)
        env = clean_env(node.get("env"), where=f"{where}.env")
    except InvalidSpec as exc:
        raise _refuse(f"{where}: {exc.message}", node=key) from exc
    depends = node.get("depends_on") or []
    if not isinstance(depends, list) or not all(isinstance(d, str) for d in depends):
        raise _refuse(f"{where}: depends_on must be a list of node keys", node=key)
    retries = node.get("retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise _refuse(f"{where}: retries must be a whole number from 0 to {MAX_RETRIES}", node=key)
    return {
        "key": key,
        "template": template,
        "command": command,
        "env": env,
        "depends_on": list(dict.fromkeys(depends)),
        "retries": retries,
    }


def find_cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]`` (``edges``: node → its dependencies), or None."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(edges, white)
    for start in edges:
        if color[start] != white:
            continue
        stack: list[tuple[str, Iterable[str]]] = [(start, iter(edges[start]))]
        path = [start]
        color[start] = grey
        while stack:
            node, children = stack[-1]
            for child in children:
                if color.get(child) == grey:
                    return [*path[path.index(child) :], child]
                if color.get(child) == white:
                    color[child] = grey
                    path.append(child)
                    stack.append((child, iter(edges[child])))
                    break
            else:
                color[node] = black
                path.pop()
                stack.pop()
    return None


def clean_nodes(nodes: Any) -> list[dict[str, Any]]:
    """Every node normalized, in the order given; ``DagInvalid`` for the first problem.

    Refused: not a list, no nodes or more than ``MAX_NODES``, a bad node, a repeated
    key, an unknown or self dependency, a cycle (the error names one).
    """
    if not isinstance(nodes, list) or not nodes:
        raise _refuse("nodes: a list of at least one node", field="nodes")
    if len(nodes) > MAX_NODES:
        raise _refuse(
            f"nodes: at most {MAX_NODES} nodes, got {len(nodes)}", field="nodes", count=len(nodes)
        )
    cleaned = [clean_node(node, index) for index, node in enumerate(nodes)]
    keys: set[str] = set()
    for node in cleaned:
        if node["key"] in keys:
            raise _refuse(f"node {node['key']}: the key is used twice", node=node["key"])
        keys.add(node["key"])
    for node in cleaned:
        for dep in node["depends_on"]:
            if dep == node["key"]:
                raise _refuse(f"node {dep}: depends on itself", node=dep)
            if dep not in keys:
                raise _refuse(
                    f"node {node['key']}: depends on unknown node {dep!r}",
                    node=node["key"],
                    unknown=dep,
                )
    cycle = find_cycle({node["key"]: node["depends_on"] for node in cleaned})
    if cycle:
        raise _refuse(f"cycle: {' -> '.join(cycle)}", cycle=cycle)
    return cleaned


def topological(nodes: list[dict[str, Any]]) -> list[str]:
    """Node keys so that every node comes after its dependencies (stable)."""
    done: list[str] = []
    placed: set[str] = set()
    remaining = list(nodes)
    while remaining:
        rest = []
        for node in remaining:
            if all(dep in placed for dep in node["depends_on"]):
                done.append(node["key"])
                placed.add(node["key"])
            else:
                rest.append(node)
        if len(rest) == len(remaining):  # a cycle: clean_nodes refuses these
            raise _refuse("cycle in nodes")
        remaining = rest
    return done


def downstream(nodes: list[dict[str, Any]], keys: Iterable[str]) -> set[str]:
    """Every node that depends, directly or not, on one of ``keys`` (not ``keys``)."""
    children: dict[str, list[str]] = {node["key"]: [] for node in nodes}
    for node in nodes:
        for dep in node["depends_on"]:
            children[dep].append(node["key"])
    found: set[str] = set()
    stack = list(keys)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
