"""Checking a mapping from scratch: every hard constraint, as one sentence per violation, and
the cost breakdown the search minimises.

This is deliberately independent of the search's incremental bookkeeping
(``nestbed.mapper.state``): the search's answer is re-checked here before it is returned, and the
tests check every mapping they get here too.

Traffic model (docs/mapper.md): a link between two hosts uses its bandwidth on both hosts'
interfaces and on every trunk between their switches; a LAN whose members sit on more than one
host uses each member's bandwidth on that member's host interface and on every trunk between the
member's switch and the LAN's home switch; every shaped direction costs the link emulator of the
host that runs it a full-rate stream of full-size frames.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from nestbed.mapper.fabric import Fabric
from nestbed.mapper.fit import fit
from nestbed.mapper.problem import (
    VIOLATION_WEIGHT,
    FeatureKind,
    Testbed,
    Topology,
    feature_kind,
    pps_of,
)
from nestbed.units import format_bandwidth

# The objective's weights, per Mb/s: a trunk is scarcer than a host's interface.
W_HOST = 1.0
W_TRUNK = 10.0
C_HOST = 0.5  # per host used: less than a 1 Mb/s crossing, so crossings come first
C_SWITCH = 5.0
C_SOFT = 100.0  # per unit of Emulab feature/desire weight
EPSILON = 1e-9


def bw(bps: float) -> str:
    return format_bandwidth(round(bps)) + "/s"


@dataclass
class Cost:
    """What a mapping costs, after its violations."""

    host_crossings: int = 0  # links and LAN members whose traffic leaves a host
    trunk_crossings: int = 0  # (link or LAN member, trunk) pairs
    nic_bps: int = 0  # the sum over host interfaces of the bandwidth they carry
    trunk_bps: int = 0  # the sum over trunks of the bandwidth they carry
    hosts_used: int = 0
    switches_used: int = 0
    soft: float = 0.0  # Emulab weights of soft desires and features
    max_host_load: float = 0.0  # the fullest used host: slots taken / slots
    mean_host_load: float = 0.0

    @property
    def score(self) -> float:
        return score(self.nic_bps, self.trunk_bps, self.hosts_used, self.switches_used, self.soft)


def score(nic_bps: float, trunk_bps: float, hosts: int, switches: int, soft: float) -> float:
    """The objective after violations: a crossing's bandwidth counts at both of its
    interfaces, hence the half."""
    return (
        W_HOST * nic_bps / 2e6
        + W_TRUNK * trunk_bps / 1e6
        + C_HOST * hosts
        + C_SWITCH * switches
        + C_SOFT * soft
    )


@dataclass
class Evaluation:
    violations: list[str] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    nic_load_bps: dict[str, int] = field(default_factory=dict)
    trunk_load_bps: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.violations


def _over(load: float, cap: float) -> bool:
    return load > cap * (1 + EPSILON) + EPSILON


def evaluate(
    topology: Topology,
    testbed: Testbed,
    placement: dict[str, str],
    homes: dict[str, str],
    fabric: Fabric | None = None,
) -> Evaluation:
    """Every violation of ``placement`` (node → host) and ``homes`` (spanning LAN → switch)."""
    fabric = fabric or Fabric.of(testbed)
    result = Evaluation()
    bad = result.violations
    hosts = {h.name: i for i, h in enumerate(testbed.hosts)}
    switch_index = {s: i for i, s in enumerate(fabric.switches)}
    nic: Counter[int] = Counter()
    trivial: Counter[int] = Counter()
    pps: Counter[int] = Counter()
    trunk: Counter[int] = Counter()
    cost = result.cost

    # Nodes: where, what type, how many slots, which features.
    slots: dict[int, Counter[tuple[str, bool]]] = defaultdict(Counter)
    additive: dict[int, Counter[str]] = defaultdict(Counter)
    global_users: Counter[str] = Counter()
    global_weight: dict[str, float] = {}
    occupied: set[int] = set()
    for node in topology.nodes:
        host_name = placement.get(node.name)
        if host_name not in hosts:
            bad.append(f"node {node.name} is placed on no known host ({host_name})")
            continue
        h = hosts[host_name]
        host = testbed.hosts[h]
        occupied.add(h)
        if node.fixed and node.fixed != host_name:
            bad.append(f"node {node.name} is fixed to host {node.fixed} but placed on {host_name}")
        verdict = fit(node, host)
        if verdict.type is None:
            bad.append(f"node {node.name} cannot go on host {host_name}: {verdict.reason}")
            continue
        cost.soft += verdict.soft_cost
        slots[h][(verdict.type, verdict.static)] += node.slots
        for desire, amount in node.desires.items():
            if feature_kind(desire) is FeatureKind.ADDITIVE:
                additive[h][desire] += amount
        for feature, weight in host.features.items():
            kind = feature_kind(feature)
            if kind in (FeatureKind.ONE_IS_OKAY, FeatureKind.FIRST_PAYS) and (
                feature not in node.desires
            ):
                global_users[feature] += 1
                global_weight[feature] = max(global_weight.get(feature, 0.0), weight)
        if node.subnode_of:
            parent = placement.get(node.subnode_of)
            if parent is None or host.subnode_of != parent:
                bad.append(
                    f"node {node.name} is a subnode of {node.subnode_of} but host {host_name} "
                    f"is not a subnode of {parent}"
                )
    for feature, users in sorted(global_users.items()):
        weight = global_weight[feature]
        paying = users - 1 if feature_kind(feature) is FeatureKind.ONE_IS_OKAY else 1
        cost.soft += max(paying, 0) * weight
        if paying > 0 and weight >= VIOLATION_WEIGHT:
            bad.append(f"feature {feature} is used by {users} nodes; its policy allows one")
    limited: Counter[str] = Counter()
    for h, used in sorted(slots.items()):
        host = testbed.hosts[h]
        dynamic = sorted({t for (t, static), n in used.items() if not static and n})
        if len(dynamic) > 1:
            bad.append(
                f"host {host.name} is one type at a time but holds nodes of types "
                + " and ".join(dynamic)
            )
        for t in dynamic:
            limited[t] += 1
        for (t, static), n in sorted(used.items()):
            have = (host.static_types if static else host.types).get(t, 0)
            if n > have:
                bad.append(f"host {host.name} has {have} {t} slots but holds {n}")
        for feature, amount in sorted(additive[h].items()):
            have = host.features.get(feature, 0.0)
            if _over(amount, have):
                bad.append(f"host {host.name} has {feature} {have:g} but its nodes want {amount:g}")
    for t, n in sorted(limited.items()):
        if t in testbed.type_limits and n > testbed.type_limits[t]:
            limit = testbed.type_limits[t]
            bad.append(f"{n} hosts are used as type {t}, above its limit of {limit}")
    check_policies(topology, testbed, bad)

    def where(node: str) -> int | None:
        return hosts.get(placement.get(node, ""))

    def carry(h1: int, h2: int, bps: int, what: str) -> None:
        s1, s2 = fabric.host_switch[h1], fabric.host_switch[h2]
        path = fabric.path(s1, s2)
        if path is None:
            bad.append(
                f"{what} joins hosts {testbed.hosts[h1].name} and {testbed.hosts[h2].name}, "
                "which no switches and trunks connect"
            )
            return
        for t in path:
            trunk[t] += bps
        cost.trunk_crossings += len(path)
        cost.trunk_bps += bps * len(path)

    # Links.
    for link in topology.links:
        ha, hb = where(link.a), where(link.b)
        if ha is None or hb is None:
            continue
        load = pps_of(link.bandwidth_bps) if link.shaped else 0.0
        if ha == hb:
            if not link.trivial_ok:
                bad.append(
                    f"link {link.name} has both ends on host {testbed.hosts[ha].name} "
                    "but may not be looped back inside one host"
                )
            trivial[ha] += link.bandwidth_bps
            pps[ha] += 2 * load
            continue
        nic[ha] += link.bandwidth_bps
        nic[hb] += link.bandwidth_bps
        pps[ha] += load
        pps[hb] += load
        cost.host_crossings += 1
        carry(ha, hb, link.bandwidth_bps, f"link {link.name}")

    # LANs: a hub at the home switch; a member away from it crosses the trunks between.
    for lan in topology.lans:
        placed = [(m, where(m.node)) for m in lan.members]
        placed = [(m, h) for m, h in placed if h is not None]
        spread = {h for _, h in placed}
        for m, h in placed:
            pps[h] += 2 * pps_of(m.bandwidth_bps) if lan.shaped else 0.0
        if len(spread) <= 1:
            for m, h in placed:
                trivial[h] += m.bandwidth_bps
            continue
        home = homes.get(lan.name)
        if home not in switch_index:
            bad.append(f"LAN {lan.name} spans hosts but has no home switch ({home})")
            continue
        s_home = switch_index[home]
        for m, h in placed:
            nic[h] += m.bandwidth_bps
            cost.host_crossings += 1
            path = fabric.path(fabric.host_switch[h], s_home)
            if path is None:
                bad.append(
                    f"LAN {lan.name}'s member {m.node} on host {testbed.hosts[h].name} "
                    f"cannot reach its home switch {home}"
                )
                continue
            for t in path:
                trunk[t] += m.bandwidth_bps
            cost.trunk_crossings += len(path)
            cost.trunk_bps += m.bandwidth_bps * len(path)

    for h, load in sorted(nic.items()):
        host = testbed.hosts[h]
        result.nic_load_bps[host.name] = load
        if _over(load, host.nic_bps):
            bad.append(f"host {host.name}'s {bw(host.nic_bps)} interface would carry {bw(load)}")
    for h, load in sorted(trivial.items()):
        host = testbed.hosts[h]
        if host.trivial_bps is not None and _over(load, host.trivial_bps):
            bad.append(
                f"host {host.name} can loop back {bw(host.trivial_bps)} between its nodes "
                f"but would carry {bw(load)}"
            )
    for h, load in sorted(pps.items()):
        host = testbed.hosts[h]
        if host.linkd_pps is not None and _over(load, host.linkd_pps):
            bad.append(
                f"host {host.name}'s link emulator carries {host.linkd_pps} packets/s "
                f"but would carry {load:.0f}"
            )
    for t, load in sorted(trunk.items()):
        result.trunk_load_bps[fabric.trunk_names[t]] = load
        if _over(load, fabric.trunk_bps[t]):
            bad.append(
                f"trunk {fabric.trunk_names[t]} ({bw(fabric.trunk_bps[t])}) would carry {bw(load)}"
            )
    cost.nic_bps = sum(nic.values())
    used = sorted(occupied)
    cost.hosts_used = len(used)
    cost.switches_used = len({fabric.host_switch[h] for h in used})
    fractions = [
        sum(n for (_, static), n in slots.get(h, {}).items() if not static)
        / max(sum(testbed.hosts[h].types.values()), 1)
        for h in used
    ]
    if fractions:
        cost.max_host_load = max(fractions)
        cost.mean_host_load = sum(fractions) / len(fractions)
    return result


def check_policies(topology: Topology, testbed: Testbed, bad: list[str]) -> None:
    weights: Counter[str] = Counter()
    for node in topology.nodes:
        for desire, weight in node.desires.items():
            weights[desire] += weight
            if desire in testbed.disallowed_desires:
                bad.append(
                    f"node {node.name} desires {desire}, which the testbed's policy disallows"
                )
    for desire, limit in sorted(testbed.desire_limits.items()):
        if _over(weights.get(desire, 0.0), limit):
            bad.append(
                f"the nodes desire {desire} with a total weight of {weights[desire]:g}, "
                f"above the testbed's limit of {limit:g}"
            )
