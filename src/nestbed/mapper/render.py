"""A mapping as text: assign's solution format (to compare with assign line by line) and
nestbed's own summary."""

from __future__ import annotations

from nestbed.mapper.check import bw
from nestbed.mapper.solve import Mapping, Path

NODES_PER_LINE = 10


def _uplink(mapping: Mapping, host: str) -> str:
    h = next(x for x in mapping.testbed.hosts if x.name == host)
    return f"{h.uplink or 'link-' + host} ({host}:(null),{h.switch}:(null))"


def _edge(mapping: Mapping, name: str, path: Path) -> str:
    if path.kind == "trivial":
        host = path.hosts[0]
        loop = f"{host}:loopback ({host}/null,(null))"
        return f"{name} trivial {loop} {loop}"
    trunks = " ".join(f"{t} ({t}:(null),{t}:(null))" for t in path.trunks)
    ups = [_uplink(mapping, h) for h in path.hosts]
    if len(path.hosts) == 1:  # a LAN member's link to the LAN at its home switch
        if not path.trunks:
            return f"{name} direct {ups[0]} {ups[0]}"
        return f"{name} interswitch {ups[0]} {trunks}"
    if not path.trunks:
        return f"{name} intraswitch {ups[0]} {ups[1]}"
    return f"{name} interswitch {ups[0]} {trunks} {ups[1]}"


def assign_solution(mapping: Mapping) -> str:
    """``Nodes:`` … ``End Nodes``, ``Edges:`` … ``End Edges``, ``End solution``, as assign."""
    lines = ["Nodes:"]
    lines += [f"{node} {host}" for node, host in mapping.hosts.items()]
    for lan in mapping.topology.lans:
        home = mapping.homes[lan.name]
        if home is None:  # the whole LAN inside one host
            home = mapping.hosts[lan.members[0].node] if lan.members else "(none)"
        lines.append(f"{lan.name} {home}")
    lines += ["End Nodes", "Edges:"]
    for link in mapping.topology.links:
        lines.append(_edge(mapping, link.name, mapping.paths[link.name]))
    for lan in mapping.topology.lans:
        for m in lan.members:
            lines.append(_edge(mapping, m.link, mapping.paths[m.link]))
    lines += ["End Edges", "End solution"]
    return "\n".join(lines) + "\n"


def summary(mapping: Mapping) -> str:
    """Hosts with their nodes, LAN homes, links that leave a host, trunk loads, the cost."""
    by_host: dict[str, list[str]] = {}
    for node, host in mapping.hosts.items():
        core = mapping.cores[node]
        by_host.setdefault(host, []).append(node if core is None else f"{node}@{core}")
    c = mapping.cost
    lines = [
        f"{len(mapping.hosts)} nodes on {c.hosts_used} hosts and {c.switches_used} switches "
        f"(seed {mapping.seed})",
    ]
    for host, nodes in sorted(by_host.items()):
        for start in range(0, len(nodes), NODES_PER_LINE):
            lead = f"  {host}:" if not start else " " * (len(host) + 3)
            lines.append(f"{lead} {' '.join(nodes[start : start + NODES_PER_LINE])}")
    for lan, home in sorted(mapping.homes.items()):
        lines.append(f"LAN {lan}: " + (f"home switch {home}" if home else "inside one host"))
    crossing = [(n, p) for n, p in sorted(mapping.paths.items()) if p.kind != "trivial"]
    if crossing:
        lines.append("links that leave their host:")
        for name, path in crossing:
            route = " → ".join(path.switches)
            lines.append(f"  {name}: {' ↔ '.join(path.hosts)} via {route}")
    for trunk, load in sorted(mapping.trunk_load_bps.items()):
        lines.append(f"trunk {trunk}: {bw(load)}")
    lines.append(
        f"cost: {c.host_crossings} host crossings, {c.trunk_crossings} trunk crossings "
        f"({bw(c.trunk_bps)} over trunks), busiest host {c.max_host_load:.0%} full, "
        f"score {c.score:.1f}"
    )
    return "\n".join(lines) + "\n"
