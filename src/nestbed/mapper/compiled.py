"""The problem in index form, for the search: integers instead of names, the fit of every kind
of node on every class of host computed once, and Emulab's equivalence classes of hosts.

Two hosts are in one class when nothing but their name tells them apart (same switch, types,
features and capacities, and not marked ``unique``): the search then tries one host per class
instead of every host, which is what made assign fast (the Netbed paper, §5.2).
"""

from __future__ import annotations

from dataclasses import dataclass

from nestbed.errors import UserError
from nestbed.mapper.fabric import Fabric
from nestbed.mapper.fit import Fit, fit
from nestbed.mapper.problem import FeatureKind, Testbed, Topology, feature_kind, pps_of


@dataclass
class Compiled:
    topology: Topology
    testbed: Testbed
    fabric: Fabric
    node_index: dict[str, int]
    host_index: dict[str, int]
    node_slots: list[int]
    node_kind: list[int]
    node_fixed: list[int]
    node_additive: list[list[tuple[int, float]]]  # (feature index, amount)
    node_links: list[list[int]]
    node_lans: list[list[tuple[int, int]]]  # (lan, member index)
    host_class: list[int]
    class_hosts: list[list[int]]
    class_switch: list[int]
    host_slots: list[int]  # the most nodes of its largest dynamic type (static if none)
    fits: list[list[Fit]]  # [kind][class]
    link_a: list[int]
    link_b: list[int]
    link_bps: list[int]
    link_pps: list[float]
    link_trivial_ok: list[bool]
    lan_members: list[list[tuple[int, int, float]]]  # (node, bps, pps)
    additive_names: list[str]
    additive_cap: list[list[float]]  # [host][feature index]
    global_features: list[tuple[str, FeatureKind, float]]  # name, kind, weight
    host_globals: list[list[int]]  # per host, indices into global_features
    node_desires: list[frozenset[str]]
    node_parent: list[int]  # subnode_of, as a node index (-1: none)
    node_children: list[list[int]]
    host_parent: list[int]  # subnode_of, as a host index (-1: none)


def compile_problem(topology: Topology, testbed: Testbed) -> Compiled:
    fabric = Fabric.of(testbed)
    node_index = {n.name: i for i, n in enumerate(topology.nodes)}
    host_index = {h.name: i for i, h in enumerate(testbed.hosts)}
    if len(node_index) != len(topology.nodes):
        raise UserError("two virtual nodes share a name; give each node its own name")
    if len(host_index) != len(testbed.hosts):
        raise UserError("two hosts share a name; give each host its own name")

    # Host classes.
    class_of_key: dict[object, int] = {}
    host_class, class_hosts, class_switch = [], [], []
    for h, host in enumerate(testbed.hosts):
        key: object = (
            fabric.host_switch[h],
            tuple(sorted(host.types.items())),
            tuple(sorted(host.static_types.items())),
            tuple(sorted(host.features.items())),
            host.nic_bps,
            host.trivial_bps,
            host.linkd_pps,
            host.subnode_of,
        )
        if host.unique:
            key = ("unique", h)
        if key not in class_of_key:
            class_of_key[key] = len(class_hosts)
            class_hosts.append([])
            class_switch.append(fabric.host_switch[h])
        c = class_of_key[key]
        host_class.append(c)
        class_hosts[c].append(h)

    # Node kinds: nodes that only their names and links tell apart.
    kind_of_key: dict[object, int] = {}
    node_kind = []
    kinds = []
    for node in topology.nodes:
        key = (node.types, node.slots, tuple(sorted(node.desires.items())))
        if key not in kind_of_key:
            kind_of_key[key] = len(kinds)
            kinds.append(node)
        node_kind.append(kind_of_key[key])
    fits = [[fit(kind, testbed.hosts[hosts[0]]) for hosts in class_hosts] for kind in kinds]

    additive_names = sorted(
        {d for n in topology.nodes for d in n.desires if feature_kind(d) is FeatureKind.ADDITIVE}
    )
    additive_at = {name: i for i, name in enumerate(additive_names)}
    global_features = sorted(
        {
            (f, feature_kind(f), w)
            for h in testbed.hosts
            for f, w in h.features.items()
            if feature_kind(f) in (FeatureKind.ONE_IS_OKAY, FeatureKind.FIRST_PAYS)
        },
        key=lambda g: g[0],
    )
    # One weight per global feature: the largest any host gives it.
    merged: dict[str, tuple[str, FeatureKind, float]] = {}
    for name, kind, weight in global_features:
        if name not in merged or weight > merged[name][2]:
            merged[name] = (name, kind, weight)
    global_list = [merged[k] for k in sorted(merged)]
    global_at = {g[0]: i for i, g in enumerate(global_list)}

    node_links: list[list[int]] = [[] for _ in topology.nodes]
    link_a, link_b, link_bps, link_pps, link_ok = [], [], [], [], []
    for i, link in enumerate(topology.links):
        for end in (link.a, link.b):
            if end not in node_index:
                raise UserError(f"link {link.name} names node {end}, which does not exist")
        a, b = node_index[link.a], node_index[link.b]
        link_a.append(a)
        link_b.append(b)
        link_bps.append(link.bandwidth_bps)
        link_pps.append(pps_of(link.bandwidth_bps) if link.shaped else 0.0)
        link_ok.append(link.trivial_ok)
        node_links[a].append(i)
        node_links[b].append(i)
    node_lans: list[list[tuple[int, int]]] = [[] for _ in topology.nodes]
    lan_members = []
    for li, lan in enumerate(topology.lans):
        members = []
        for mi, m in enumerate(lan.members):
            if m.node not in node_index:
                raise UserError(f"LAN {lan.name} names node {m.node}, which does not exist")
            v = node_index[m.node]
            members.append((v, m.bandwidth_bps, pps_of(m.bandwidth_bps) if lan.shaped else 0.0))
            node_lans[v].append((li, mi))
        lan_members.append(members)

    node_fixed = []
    for node in topology.nodes:
        if node.fixed is None:
            node_fixed.append(-1)
        elif node.fixed not in host_index:
            raise UserError(f"node {node.name} is fixed to host {node.fixed}, which does not exist")
        else:
            node_fixed.append(host_index[node.fixed])

    node_parent = []
    children: list[list[int]] = [[] for _ in topology.nodes]
    for i, node in enumerate(topology.nodes):
        if node.subnode_of is None:
            node_parent.append(-1)
        elif node.subnode_of not in node_index:
            raise UserError(
                f"node {node.name} is a subnode of {node.subnode_of}, which does not exist"
            )
        else:
            node_parent.append(node_index[node.subnode_of])
            children[node_index[node.subnode_of]].append(i)
    return Compiled(
        topology=topology,
        testbed=testbed,
        fabric=fabric,
        node_index=node_index,
        host_index=host_index,
        node_slots=[n.slots for n in topology.nodes],
        node_kind=node_kind,
        node_fixed=node_fixed,
        node_additive=[
            [(additive_at[d], w) for d, w in sorted(n.desires.items()) if d in additive_at]
            for n in topology.nodes
        ],
        node_links=node_links,
        node_lans=node_lans,
        host_class=host_class,
        class_hosts=class_hosts,
        class_switch=class_switch,
        host_slots=[
            min(max(h.types.values() or h.static_types.values() or [0]), len(topology.nodes))
            for h in testbed.hosts
        ],
        fits=fits,
        link_a=link_a,
        link_b=link_b,
        link_bps=link_bps,
        link_pps=link_pps,
        link_trivial_ok=link_ok,
        lan_members=lan_members,
        additive_names=additive_names,
        additive_cap=[
            [h.features.get(name, 0.0) for name in additive_names] for h in testbed.hosts
        ],
        global_features=global_list,
        host_globals=[
            sorted(global_at[f] for f in h.features if f in global_at) for h in testbed.hosts
        ],
        node_desires=[frozenset(n.desires) for n in topology.nodes],
        node_parent=node_parent,
        node_children=children,
        host_parent=[
            host_index.get(h.subnode_of, -1) if h.subnode_of else -1 for h in testbed.hosts
        ],
    )
