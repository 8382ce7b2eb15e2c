"""Generated problems, for the benchmark and the tests: trees, rings and LANs of virtual nodes;
testbeds of switches full of identical hosts (beyond two switches, every switch hangs from a
core switch by one trunk); and the hand placements a person would make for them — by subtree,
by ring segment, by filling hosts in order — as the reference the mapper is measured against.
"""

from __future__ import annotations

from nestbed.mapper.problem import (
    Host,
    LanMember,
    Testbed,
    Topology,
    Trunk,
    VirtualLan,
    VirtualLink,
    VirtualNode,
)

MB = 1_000_000


def _nodes(n: int) -> tuple[VirtualNode, ...]:
    return tuple(VirtualNode(f"n{i}") for i in range(n))


def tree(n: int, bandwidth_bps: int = 100 * MB, arity: int = 2) -> Topology:
    """Node i's parent is (i - 1) // arity: a complete tree numbered breadth first."""
    links = tuple(
        VirtualLink(f"l{i}", f"n{(i - 1) // arity}", f"n{i}", bandwidth_bps) for i in range(1, n)
    )
    return Topology(_nodes(n), links, name=f"tree{n}")


def ring(n: int, bandwidth_bps: int = 100 * MB) -> Topology:
    links = tuple(VirtualLink(f"l{i}", f"n{i}", f"n{(i + 1) % n}", bandwidth_bps) for i in range(n))
    return Topology(_nodes(n), links, name=f"ring{n}")


def lan(n: int, bandwidth_bps: int = 100 * MB) -> Topology:
    members = tuple(LanMember(f"n{i}", bandwidth_bps, f"lan0-n{i}") for i in range(n))
    return Topology(_nodes(n), lans=(VirtualLan("lan0", members),), name=f"lan{n}")


def testbed(
    switches: int,
    hosts_per_switch: int,
    *,
    slots: int = 1,
    nic_bps: int = 100 * MB,
    trunk_bps: int = 1000 * MB,
    linkd_pps: int | None = None,
) -> Testbed:
    names = [f"sw{s}" for s in range(switches)]
    hosts = tuple(
        Host(
            f"pc{s * hosts_per_switch + i}",
            names[s],
            nic_bps,
            types={"pc": slots},
            cores=slots,
            linkd_pps=linkd_pps,
            uplink=f"link-pc{s * hosts_per_switch + i}",
        )
        for s in range(switches)
        for i in range(hosts_per_switch)
    )
    if switches == 2:
        trunks: tuple[Trunk, ...] = (Trunk("trunk-sw0-sw1", "sw0", "sw1", trunk_bps),)
        all_switches = tuple(names)
    elif switches > 2:
        trunks = tuple(Trunk(f"trunk-{s}", s, "core", trunk_bps) for s in names)
        all_switches = (*names, "core")
    else:
        trunks, all_switches = (), tuple(names)
    return Testbed(hosts, all_switches, trunks)


def preorder(topology: Topology) -> list[str]:
    """The nodes in depth-first order from the first node (links only)."""
    children: dict[str, list[str]] = {n.name: [] for n in topology.nodes}
    for link in topology.links:
        children[link.a].append(link.b)
        children[link.b].append(link.a)
    order, seen, stack = [], set(), [topology.nodes[0].name]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        stack.extend(reversed(children[node]))
    order += [n.name for n in topology.nodes if n.name not in seen]
    return order


def hand_placement(topology: Topology, bed: Testbed) -> dict[str, str]:
    """Fills hosts in order, switch by switch, with the nodes in depth-first order: a tree by
    subtree, a ring by segment, a LAN member by member."""
    order = preorder(topology) if topology.links else [n.name for n in topology.nodes]
    slots = [(h.name, h.types.get("pc", 1)) for h in bed.hosts]
    placement: dict[str, str] = {}
    host, used = 0, 0
    for node in order:
        if used >= slots[host][1]:
            host, used = host + 1, 0
        placement[node] = slots[host][0]
        used += 1
    return placement


def best_homes(topology: Topology, bed: Testbed, placement: dict[str, str]) -> dict[str, str]:
    """For each LAN of a hand placement, the switch that makes its trunks' fullest least full."""
    from nestbed.mapper.fabric import Fabric

    fabric = Fabric.of(bed)
    switch_of = {h.name: fabric.host_switch[i] for i, h in enumerate(bed.hosts)}
    homes = {}
    for v in topology.lans:
        per_switch: dict[int, int] = {}
        for m in v.members:
            s = switch_of[placement[m.node]]
            per_switch[s] = per_switch.get(s, 0) + m.bandwidth_bps
        best = None
        for home in range(len(fabric.switches)):
            loads: dict[int, int] = {}
            for s, bps in per_switch.items():
                for t in fabric.path(s, home) or ():
                    loads[t] = loads.get(t, 0) + bps
            worst = max((load / fabric.trunk_bps[t] for t, load in loads.items()), default=0.0)
            candidate = (worst, sum(loads.values()), home)
            if best is None or candidate < best:
                best = candidate
        assert best is not None
        homes[v.name] = fabric.switches[best[2]]
    return homes
