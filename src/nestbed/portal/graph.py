"""An experiment's topology for the page: its IR as Cytoscape.js elements (nodes, LANs as
small hubs, links as edges carrying their shaping), and as table rows for the searchable
view of large experiments. Pure: the IR, positions and hosts in, plain data out."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from nestbed.units import format_bandwidth, format_delay

LARGE = 200
"""Above this many nodes the page draws a simplified graph beside a searchable table."""


def shaping(port: dict[str, Any], peer: str) -> str:
    """One direction of a link, as a person reads it: ``r1→r2 10Mb 20ms loss 1% q100``."""
    egress = port.get("egress") or {}
    parts = [f"{port.get('node')}→{peer}"]
    bps = egress.get("bandwidth_bps") or 0
    parts.append(format_bandwidth(bps) if bps else "unshaped")
    if egress.get("delay_s"):
        parts.append(format_delay(egress["delay_s"]))
    if egress.get("loss"):
        parts.append(f"loss {egress['loss']:.3g}")
    limit = (egress.get("queue") or {}).get("limit")
    if limit:
        parts.append(f"queue {limit} {(egress.get('queue') or {}).get('limit_unit', '')}".strip())
    return " ".join(parts)


def link_text(link: dict[str, Any]) -> str:
    ports = link.get("ports") or []
    if len(ports) == 2:
        a, b = ports
        return f"{shaping(a, b['node'])}; {shaping(b, a['node'])}"
    return "; ".join(shaping(p, link["name"]) for p in ports)


def elements(
    ir: dict[str, Any], positions: dict[str, dict[str, float]], hosts: dict[str, str]
) -> list[dict[str, Any]]:
    """Cytoscape elements: ``node`` and ``lan`` nodes (with their saved ``position``) and an
    edge per link or LAN membership, each with its shaping in ``shaping``."""
    found: list[dict[str, Any]] = []

    def place(element: dict[str, Any], key: str) -> dict[str, Any]:
        at = positions.get(key)
        if at is not None:
            element["position"] = {"x": at["x"], "y": at["y"]}
        return element

    for node in ir.get("nodes", []):
        name = node["name"]
        host = hosts.get(name) or node.get("fixed_host") or ""
        found.append(place({"data": {"id": f"n:{name}", "label": name, "kind": "node",
                                     "host": host}}, name))  # fmt: skip
    for lan in ir.get("lans", []):
        name = lan["name"]
        text = link_text(lan)
        found.append(place({"data": {"id": f"l:{name}", "label": name, "kind": "lan",
                                     "shaping": text}}, f"lan:{name}"))  # fmt: skip
        for port in lan.get("ports", []):
            found.append({"data": {"id": f"e:{name}:{port['node']}", "source": f"n:{port['node']}",
                                   "target": f"l:{name}", "label": name,
                                   "shaping": shaping(port, name)}})  # fmt: skip
    for link in ir.get("links", []):
        ports = link.get("ports") or []
        if len(ports) != 2:
            continue
        found.append({"data": {"id": f"e:{link['name']}", "source": f"n:{ports[0]['node']}",
                               "target": f"n:{ports[1]['node']}", "label": link["name"],
                               "shaping": link_text(link)}})  # fmt: skip
    return found


def layered(
    ir: dict[str, Any], spacing: float = 30.0, gap: float = 90.0, width: int = 40
) -> dict[str, dict[str, float]]:
    """Positions in layers by hops from the best-connected node, a layer wider than
    ``width`` folded onto more rows, each component below the last: a layered layout
    computed here in linear time, so that the browser draws a large graph at once instead
    of laying it out."""
    around: dict[str, set[str]] = {n["name"]: set() for n in ir.get("nodes", [])}
    for link in ir.get("links", []):
        ends = [p["node"] for p in link.get("ports", [])]
        for a in ends:
            around.setdefault(a, set()).update(e for e in ends if e != a)
    for lan in ir.get("lans", []):
        key = f"lan:{lan['name']}"
        members = [p["node"] for p in lan.get("ports", [])]
        around[key] = set(members)
        for m in members:
            around.setdefault(m, set()).add(key)
    placed: dict[str, dict[str, float]] = {}
    y = 0.0
    for root in sorted(around, key=lambda k: -len(around[k])):
        if root in placed:
            continue
        layer, seen = [root], {root}
        while layer:
            for start in range(0, len(layer), width):
                row = layer[start : start + width]
                for i, k in enumerate(row):
                    placed[k] = {"x": (i - (len(row) - 1) / 2) * spacing, "y": y}
                y += gap / 2
            y += gap / 2
            nxt = []
            for k in layer:
                for m in sorted(around[k]):
                    if m not in seen:
                        seen.add(m)
                        nxt.append(m)
            layer = nxt
        y += gap
    return placed


def rows(ir: dict[str, Any], hosts: dict[str, str]) -> list[dict[str, str]]:
    """A row per node: its name, host, and each link or LAN it is on with the shaping."""
    on: dict[str, list[str]] = {n["name"]: [] for n in ir.get("nodes", [])}
    for kind in ("links", "lans"):
        for link in ir.get(kind, []):
            for port in link.get("ports", []):
                on.setdefault(port["node"], []).append(f"{link['name']} ({port.get('ip', '')})")
    return [{"node": n["name"], "host": hosts.get(n["name"]) or n.get("fixed_host") or "",
             "links": ", ".join(on.get(n["name"], []))}
            for n in ir.get("nodes", [])]  # fmt: skip


def link_rows(ir: dict[str, Any]) -> list[dict[str, str]]:
    """A row per link and LAN: its name, kind, members and shaping."""
    return [{"name": link["name"], "kind": kind.rstrip("s"),
             "members": " ".join(p["node"] for p in link.get("ports", [])),
             "shaping": link_text(link)}
            for kind in ("links", "lans") for link in ir.get(kind, [])]  # fmt: skip


def clean_positions(sent: Any, names: AbstractSet[str]) -> dict[str, dict[str, float]]:
    """The positions a page sent, kept only for the experiment's own node and LAN keys
    (``NODE`` or ``lan:NAME``) with finite numbers."""
    import math

    kept: dict[str, dict[str, float]] = {}
    if not isinstance(sent, dict):
        return kept
    for key, at in sent.items():
        if key not in names or not isinstance(at, dict):
            continue
        try:
            x, y = float(at["x"]), float(at["y"])
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(x) and math.isfinite(y) and abs(x) < 1e7 and abs(y) < 1e7:
            kept[key] = {"x": round(x, 1), "y": round(y, 1)}
    return kept
