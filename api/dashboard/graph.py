"""The topology of an environment drawn as an SVG graph, on the server.

Services are placed in columns by install level (GET topology's
``levels``: a column depends only on columns to its left), each with its
units below it; a ``depends_on`` edge is an arrow from the dependent service
to the one it needs.  Colours come from the units' and services' status
(CSS classes), so no script or external library is needed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

COLUMN = 250      # horizontal distance between levels
SERVICE_W, SERVICE_H = 210, 40
UNIT_W, UNIT_H, UNIT_GAP = 188, 24, 8
SERVICE_GAP = 28  # between two services of one column
MARGIN = 20
LABEL = 28        # characters that fit in a box


@dataclass
class Box:
    """A service box and where its units go."""

    x: int
    y: int
    height: int


def _short(text: Any, limit: int = LABEL) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= limit else value[:limit - 1] + "…"


def _columns(view: dict[str, Any]) -> list[list[str]]:
    """The levels; with none (a cycle), every service in one column."""
    services = [n["id"] for n in view.get("nodes", []) if n.get("kind") == "service"]
    levels = [list(level) for level in view.get("levels") or []]
    placed = {sid for level in levels for sid in level}
    rest = [sid for sid in services if sid not in placed]
    if rest:
        levels.append(rest)
    return levels


def _layout(columns: list[list[str]], units: dict[str, list[dict]]) -> dict[str, Box]:
    boxes: dict[str, Box] = {}
    for index, column in enumerate(columns):
        y = MARGIN
        for sid in column:
            height = SERVICE_H + len(units.get(sid, [])) * (UNIT_H + UNIT_GAP)
            boxes[sid] = Box(MARGIN + index * COLUMN, y, height)
            y += height + SERVICE_GAP
    return boxes


def _status_class(status: dict[str, Any] | None) -> str:
    local = (status or {}).get("local") or "unknown"
    return "st-" + "".join(c for c in str(local) if c.isalnum())


def render(view: dict[str, Any], status: dict[str, dict[str, Any]]) -> Markup:
    """The SVG of a topology ``view``; ``status`` maps ids to their status objects."""
    nodes = {n["id"]: n for n in view.get("nodes", [])}
    units: dict[str, list[dict]] = {}
    for node in view.get("nodes", []):
        if node.get("kind") == "unit":
            units.setdefault(node.get("service"), []).append(node)
    columns = _columns(view)
    if not columns:
        return Markup('<p class="muted">No services yet.</p>')
    boxes = _layout(columns, units)
    width = MARGIN * 2 + (len(columns) - 1) * COLUMN + SERVICE_W
    height = MARGIN * 2 + max(b.y + b.height for b in boxes.values()) - MARGIN
    parts = [f'<svg class="topology" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="Topology: services by install level">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
             'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
             '<path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead"/></marker></defs>']
    parts.extend(_edge(edge, boxes) for edge in view.get("edges", [])
                 if edge.get("kind") == "depends_on")
    for sid, box in boxes.items():
        parts.append(_service(nodes.get(sid, {"id": sid}), box, status.get(sid)))
        for index, unit in enumerate(units.get(sid, [])):
            parts.append(_unit(unit, box, index, status.get(unit["id"])))
    parts.append("</svg>")
    return Markup("".join(parts))


def _edge(edge: dict[str, Any], boxes: dict[str, Box]) -> str:
    source, target = boxes.get(edge.get("source")), boxes.get(edge.get("target"))
    if source is None or target is None:
        return ""
    x1, y1 = source.x, source.y + SERVICE_H // 2
    x2, y2 = target.x + SERVICE_W, target.y + SERVICE_H // 2
    bend = max(40, abs(x1 - x2) // 2)
    title = escape(f"depends on (through {edge.get('reason')})")
    return (f'<path class="edge" d="M {x1} {y1} C {x1 - bend} {y1}, {x2 + bend} {y2}, '
            f'{x2} {y2}" marker-end="url(#arrow)"><title>{title}</title></path>')


def _service(node: dict[str, Any], box: Box, status: dict[str, Any] | None) -> str:
    state = (status or {}).get("state") or "initial"
    local = (status or {}).get("local") or "unknown"
    title = escape(f"{node.get('name')} ({node.get('type')}): {local}, {state}")
    kind = _short(f"{node.get('type')} · {local}")
    return (f'<g class="node service {_status_class(status)}"><title>{title}</title>'
            f'<rect x="{box.x}" y="{box.y}" width="{SERVICE_W}" height="{SERVICE_H}" rx="6"/>'
            f'<text x="{box.x + 10}" y="{box.y + 17}" class="name">'
            f'{escape(_short(node.get("name") or node.get("id"), 22))}</text>'
            f'<text x="{box.x + 10}" y="{box.y + 32}" class="sub">'
            f'{escape(kind)}</text></g>')


def _unit(unit: dict[str, Any], box: Box, index: int, status: dict[str, Any] | None) -> str:
    x = box.x + SERVICE_W - UNIT_W
    y = box.y + SERVICE_H + UNIT_GAP + index * (UNIT_H + UNIT_GAP)
    local = (status or {}).get("local") or "unknown"
    state = (status or {}).get("state") or "initial"
    label = unit.get("hostname") or unit.get("name") or unit.get("id")
    title = escape(f"{unit.get('name')}: {local}, {state}")
    line_x = box.x + 10
    return (f'<g class="node unit {_status_class(status)}"><title>{title}</title>'
            f'<path class="contained" d="M {line_x} {box.y + SERVICE_H} V {y + UNIT_H // 2} '
            f'H {x}"/>'
            f'<rect x="{x}" y="{y}" width="{UNIT_W}" height="{UNIT_H}" rx="4"/>'
            f'<text x="{x + 8}" y="{y + 16}" class="sub">'
            f'{escape(_short(f"{label} · {state}", LABEL - 2))}</text></g>')
