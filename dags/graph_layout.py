"""Where each node of a run is drawn on its admin page: a layered left-to-right layout.

Pure: nodes in, boxes and edges out. A node's column is the length of the longest path
of dependencies that leads to it; within a column, nodes keep the graph's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 46, 60, 18, 10
COLOURS = {
    "waiting": "#adb5bd",
    "ready": "#0dcaf0",
    "running": "#0d6efd",
    "succeeded": "#198754",
    "failed": "#dc3545",
    "skipped": "#6c757d",
    "cancelled": "#fd7e14",
}


@dataclass(frozen=True)
class Box:
    key: str
    status: str
    label: str
    x: int
    y: int
    colour: str
    title: str


@dataclass(frozen=True)
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Layout:
    boxes: list[Box]
    edges: list[Edge]
    width: int
    height: int


def layout(graph: list[dict[str, Any]], states: dict[str, dict[str, Any]]) -> Layout:
    """``graph``: nodes in dependency order; ``states``: key → {status, attempt, reason}."""
    column: dict[str, int] = {}
    for node in graph:
        column[node["key"]] = 1 + max((column[d] for d in node["depends_on"]), default=-1)
    rows: dict[int, int] = {}
    where: dict[str, tuple[int, int]] = {}
    boxes = []
    for node in graph:
        key = node["key"]
        col = column[key]
        row = rows.get(col, 0)
        rows[col] = row + 1
        x, y = PAD + col * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y)
        where[key] = (x, y)
        state = states.get(key, {})
        status = state.get("status", "waiting")
        attempt = state.get("attempt", 0)
        boxes.append(
            Box(
                key=key,
                status=status,
                label=f"{status}" + (f" · try {attempt}" if attempt > 1 else ""),
                x=x,
                y=y,
                colour=COLOURS.get(status, "#6c757d"),
                title=state.get("reason") or status,
            )
        )
    edges = [
        Edge(
            x1=where[dep][0] + BOX_W,
            y1=where[dep][1] + BOX_H // 2,
            x2=where[node["key"]][0],
            y2=where[node["key"]][1] + BOX_H // 2,
        )
        for node in graph
        for dep in node["depends_on"]
    ]
    columns = max(column.values(), default=0) + 1
    height = max(rows.values(), default=1)
    return Layout(
        boxes=boxes,
        edges=edges,
        width=2 * PAD + columns * BOX_W + (columns - 1) * GAP_X,
        height=2 * PAD + height * BOX_H + (height - 1) * GAP_Y,
    )
