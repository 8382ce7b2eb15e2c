"""Refusing, before any search, what no placement can satisfy — with the reason in one sentence.

These are necessary conditions that each concern one constraint (a node's type or desires, a
fixed node, the slots of a type, a type limit, a desire policy). A problem that passes them may
still not fit (bandwidth, combinations of constraints); the search then says which constraint
its best placement still breaks.
"""

from __future__ import annotations

import math
from collections import defaultdict

from nestbed.errors import UserError
from nestbed.mapper.check import bw, check_policies
from nestbed.mapper.fabric import Fabric
from nestbed.mapper.fit import fit
from nestbed.mapper.problem import Testbed, Topology, VirtualNode


def precheck(topology: Topology, testbed: Testbed) -> None:
    if not testbed.hosts:
        raise UserError("the testbed has no hosts; describe at least one")
    policy: list[str] = []
    check_policies(topology, testbed, policy)
    if policy:
        raise UserError(policy[0])
    hosts = {h.name: h for h in testbed.hosts}
    verdicts: dict[object, bool] = {}
    for node in topology.nodes:
        if node.fixed is not None:
            if node.fixed not in hosts:
                raise UserError(
                    f"node {node.name} is fixed to host {node.fixed}, which the testbed lacks"
                )
            verdict = fit(node, hosts[node.fixed])
            if verdict.type is None:
                raise UserError(
                    f"node {node.name} is fixed to host {node.fixed}, "
                    f"which cannot take it: {verdict.reason}"
                )
            continue
        key = (node.types, node.slots, tuple(sorted(node.desires.items())))
        if key not in verdicts:
            verdicts[key] = any(fit(node, h).type is not None for h in testbed.hosts)
        if not verdicts[key]:
            raise UserError(_why_nowhere(node, testbed))
    _check_type_capacity(topology, testbed)
    _check_lans(topology, testbed)


def _why_nowhere(node: VirtualNode, testbed: Testbed) -> str:
    kinds = " or ".join(node.types)
    typed = [
        h for h in testbed.hosts if any(t in h.types or t in h.static_types for t in node.types)
    ]
    if not typed:
        return f"node {node.name} wants type {kinds} but no host has a {kinds} slot"
    return (
        f"node {node.name} wants type {kinds}, but no host of that type can take it "
        f"(host {typed[0].name}: {fit(node, typed[0]).reason})"
    )


def _check_type_capacity(topology: Topology, testbed: Testbed) -> None:
    """Nodes that accept one type only need that many slots of it, on few enough hosts."""
    demand: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for node in topology.nodes:
        if len(node.types) == 1:
            demand[node.types[0]] += node.slots
            count[node.types[0]] += 1
    for t, need in sorted(demand.items()):
        static = sum(h.static_types.get(t, 0) for h in testbed.hosts)
        dynamic = [h.types[t] for h in testbed.hosts if t in h.types]
        have = static + sum(dynamic)
        if need > have:
            raise UserError(
                f"the {count[t]} nodes of type {t} need {need} {t} slots "
                f"but the testbed has only {have}"
            )
        limit = testbed.type_limits.get(t)
        if limit is not None and not static:
            biggest = max(dynamic, default=1) or 1
            hosts_needed = math.ceil(need / biggest)
            if hosts_needed > limit:
                raise UserError(
                    f"the {count[t]} nodes of type {t} need at least {hosts_needed} hosts "
                    f"of that type but the testbed's limit is {limit}"
                )


def _check_lans(topology: Topology, testbed: Testbed) -> None:
    """A LAN too big for one host and one switch sends its outside members' traffic through
    the trunks of its home switch: at least the smallest members' bandwidth, whichever switch."""
    fabric = Fabric.of(testbed)
    hosts_at: dict[int, list[int]] = defaultdict(list)
    for i in range(len(testbed.hosts)):
        hosts_at[fabric.host_switch[i]].append(i)
    trunk_at = [0] * len(fabric.switches)
    for t, (a, b) in enumerate(fabric.trunk_ends):
        trunk_at[a] += fabric.trunk_bps[t]
        trunk_at[b] += fabric.trunk_bps[t]
    slots = [sum(h.types.values()) + sum(h.static_types.values()) for h in testbed.hosts]
    for lan in topology.lans:
        rates = sorted(m.bandwidth_bps for m in lan.members)
        n = len(rates)
        if not n or n <= max(slots):
            continue
        slowest = rates[0]
        best: tuple[int, int, int, int] | None = None  # excess, traffic, held, switch
        for s in range(len(fabric.switches)):
            held = sum(
                min(slots[h], testbed.hosts[h].nic_bps // slowest if slowest else slots[h])
                for h in hosts_at.get(s, [])
            )
            traffic = sum(rates[: max(n - held, 0)])
            candidate = (traffic - trunk_at[s], traffic, min(held, n), s)
            if best is None or candidate < best:
                best = candidate
        if best is not None and best[0] > 0:
            _, traffic, held, s = best
            raise UserError(
                f"LAN {lan.name}'s {n} members of {bw(rates[-1])} cannot all sit on one "
                "switch, and whichever switch is its home the others overload its trunks: "
                f"at best switch {fabric.switches[s]} holds {held}, and the other "
                f"{n - held} send {bw(traffic)} over its {bw(trunk_at[s])} of trunks"
            )
