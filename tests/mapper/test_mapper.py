"""The mapper's search: valid, deterministic, sensible on small cases it can be checked by hand,
and exactly as good as its own checker says (the incremental state agrees with ``evaluate``)."""

from __future__ import annotations

import random

import pytest

from nestbed.errors import UserError
from nestbed.mapper import (
    Host,
    LanMember,
    Topology,
    Trunk,
    VirtualLan,
    VirtualLink,
    VirtualNode,
    evaluate,
    map_topology,
)
from nestbed.mapper import (
    Testbed as Bed,
)
from nestbed.mapper import generate as g
from nestbed.mapper.compiled import compile_problem
from nestbed.mapper.partition import initial_placement
from nestbed.mapper.state import State

MB = g.MB


def test_one_host_without_constraints_takes_every_node_and_loops_every_link_back():
    topology = g.ring(12)
    testbed = Bed((Host("solo", "switch", 0, types={"pc": 64}, cores=4),), ("switch",))
    mapping = map_topology(topology, testbed)
    assert set(mapping.hosts.values()) == {"solo"}
    assert {p.kind for p in mapping.paths.values()} == {"trivial"}
    assert sorted(mapping.cores.values()) == sorted(i % 4 for i in range(12))
    assert mapping.cost.host_crossings == mapping.cost.trunk_crossings == 0


def test_the_papers_six_node_example_crosses_the_trunk_once():
    # Figure 5 of the Netbed paper: two triangles joined by one link, two switches of three.
    nodes = tuple(VirtualNode(n) for n in "ABCDEF")
    pairs = ["AB", "BC", "CA", "DE", "EF", "FD", "CD"]
    links = tuple(VirtualLink(f"l{a}{b}", a, b, 100 * MB) for a, b in pairs)
    hosts = tuple(Host(f"pc{i}", f"sw{i // 3}", 300 * MB, types={"pc": 1}) for i in range(6))
    testbed = Bed(hosts, ("sw0", "sw1"), (Trunk("t", "sw0", "sw1", 100 * MB),))
    mapping = map_topology(Topology(nodes, links), testbed, seed=3)
    switch = {h.name: h.switch for h in hosts}
    sides = {
        frozenset(n for n in "ABCDEF" if switch[mapping.hosts[n]] == s) for s in ("sw0", "sw1")
    }
    assert sides == {frozenset("ABC"), frozenset("DEF")}
    assert mapping.cost.trunk_crossings == 1
    assert mapping.paths["lCD"].trunks == ("t",)


def test_the_same_seed_gives_the_same_mapping():
    topology, testbed = g.tree(200), g.testbed(3, 20, slots=4, nic_bps=1000 * MB)
    first = map_topology(topology, testbed, seed=7).to_dict()
    assert map_topology(topology, testbed, seed=7).to_dict() == first


def test_a_lan_too_big_for_a_switch_is_homed_where_its_trunks_hold():
    # 100 one-slot members on 8 switches of 64: the home must be the core, whose eight
    # 10 Gb/s trunks each carry one edge switch's members.
    topology, testbed = g.lan(100), g.testbed(8, 64, trunk_bps=10_000 * MB)
    mapping = map_topology(topology, testbed)
    assert evaluate(topology, testbed, mapping.hosts, _homes(mapping)).valid
    assert mapping.cost.hosts_used == 100


def test_tree_and_ring_cross_trunks_no_more_than_a_hand_partition_plus_a_fifth():
    for topology in (g.tree(400), g.ring(400)):
        testbed = g.testbed(8, 64, slots=4, nic_bps=1000 * MB)
        hand = g.hand_placement(topology, testbed)
        reference = evaluate(topology, testbed, hand, g.best_homes(topology, testbed, hand))
        assert reference.valid
        mapping = map_topology(topology, testbed)
        assert mapping.cost.trunk_crossings <= 1.2 * reference.cost.trunk_crossings


def test_types_features_and_fixed_nodes_are_honoured():
    hosts = (
        Host("big", "sw", 1000 * MB, types={"pc3000": 2}, features={"gpu": 0.5}),
        Host("small0", "sw", 1000 * MB, types={"pc": 2}),
        Host("small1", "sw", 1000 * MB, types={"pc": 2}),
        Host("shared", "sw", 1000 * MB, types={"pc": 4}, features={"*&license": 1.0}),
    )
    nodes = (
        VirtualNode("fast", types=("pc3000",), desires={"gpu": 1.0}),
        VirtualNode("a"),
        VirtualNode("b", fixed="small1"),
        VirtualNode("c"),
        VirtualNode("d"),
        VirtualNode("e"),
    )
    links = tuple(VirtualLink(f"l{i}", "fast", n.name, 10 * MB) for i, n in enumerate(nodes[1:]))
    topology, testbed = Topology(nodes, links), Bed(hosts, ("sw",))
    mapping = map_topology(topology, testbed)
    assert mapping.hosts["fast"] == "big" and mapping.hosts["b"] == "small1"
    # *&license: one node on "shared" is free, a second would be a violation.
    assert list(mapping.hosts.values()).count("shared") <= 1
    assert evaluate(topology, testbed, mapping.hosts, {}).valid


def _homes(mapping):  # type: ignore[no-untyped-def]
    return {k: v for k, v in mapping.homes.items() if v}


def _random_problem(rng: random.Random) -> tuple[Topology, Bed]:
    """A testbed and a topology built around a planted placement that meets every constraint,
    so the problem is feasible by construction."""
    switches = rng.choice([1, 2, 3])
    per_switch = rng.randint(2, 6)
    types = ["pc", "pc3000"]
    hosts = []
    for s in range(switches):
        for i in range(per_switch):
            kind = rng.choice(types)
            features = {"?+cores": 4.0}
            if rng.random() < 0.3:
                features["fast"] = 0.0
            hosts.append(
                Host(
                    f"h{s}-{i}",
                    f"sw{s}",
                    rng.choice([100, 1000]) * MB,
                    types={kind: rng.randint(1, 4)},
                    features=features,
                    linkd_pps=rng.choice([None, 50_000]),
                )
            )
    names = [f"sw{s}" for s in range(switches)]
    if switches == 3:
        trunks = tuple(Trunk(f"t{s}", s, "core", rng.choice([1000, 10_000]) * MB) for s in names)
        names.append("core")
    else:
        trunks = tuple(Trunk(f"t{s}", "sw0", s, 1000 * MB) for s in names[1:])
    testbed = Bed(tuple(hosts), tuple(names), trunks)
    planted: dict[str, str] = {}
    nodes = []
    for host in hosts:
        kind, slots = next(iter(host.types.items()))
        for _ in range(rng.randint(0, slots)):
            name = f"n{len(nodes)}"
            desires = {"?+cores": 1.0}
            if "fast" in host.features and rng.random() < 0.5:
                desires["fast"] = 1.0
            fixed = host.name if rng.random() < 0.1 else None
            nodes.append(VirtualNode(name, types=(kind,), desires=desires, fixed=fixed))
            planted[name] = host.name
    names_ = [n.name for n in nodes]
    links = []
    for i in range(1, len(names_)):
        links.append(
            VirtualLink(f"l{i}", names_[rng.randrange(i)], names_[i], rng.choice([1, 10, 50]) * MB)
        )
    lans = []
    if len(names_) >= 4 and rng.random() < 0.5:
        members = rng.sample(names_, rng.randint(3, min(8, len(names_))))
        lans.append(VirtualLan("lan0", tuple(LanMember(m, 5 * MB, f"lan0-{m}") for m in members)))
    topology = Topology(tuple(nodes), tuple(links), tuple(lans))
    # Halve bandwidths until the planted placement fits (it always does at some point).
    for _ in range(12):
        if evaluate(topology, testbed, planted, g.best_homes(topology, testbed, planted)).valid:
            return topology, testbed
        topology = Topology(
            topology.nodes,
            tuple(
                VirtualLink(x.name, x.a, x.b, max(x.bandwidth_bps // 2, 1000))
                for x in topology.links
            ),
            tuple(
                VirtualLan(
                    v.name,
                    tuple(
                        LanMember(m.node, max(m.bandwidth_bps // 2, 1000), m.link)
                        for m in v.members
                    ),
                )
                for v in topology.lans
            ),
        )
    pytest.skip("no feasible planted problem")  # pragma: no cover


@pytest.mark.parametrize("case", range(100))
def test_every_feasible_random_problem_gets_a_mapping_that_meets_every_constraint(case):
    topology, testbed = _random_problem(random.Random(case))
    if not topology.nodes:
        return
    mapping = map_topology(topology, testbed, seed=case)
    result = evaluate(topology, testbed, mapping.hosts, _homes(mapping))
    assert result.violations == []
    assert result.cost.score == pytest.approx(mapping.cost.score)


@pytest.mark.parametrize("case", range(10))
def test_the_search_state_agrees_with_the_checker_after_random_moves(case):
    rng = random.Random(100 + case)
    topology, testbed = _random_problem(rng)
    if not topology.nodes:
        return
    p = compile_problem(topology, testbed)
    state = State(p, initial_placement(p, case))
    for _ in range(60):
        state.move(rng.randrange(len(topology.nodes)), rng.randrange(len(testbed.hosts)))
        hosts = {n.name: testbed.hosts[state.place[i]].name for i, n in enumerate(topology.nodes)}
        homes = {
            lan.name: p.fabric.switches[state.lan_home[i]]
            for i, lan in enumerate(topology.lans)
            if state.lan_home[i] >= 0
        }
        result = evaluate(topology, testbed, hosts, homes, p.fabric)
        assert (state.violation() > 0) == (not result.valid), result.violations
        assert state.cost() == pytest.approx(result.cost.score)


def test_a_mapping_with_a_violation_is_refused_naming_the_constraint():
    # Two one-slot hosts and a 2 Gb/s link: its ends cannot share a host, and no 1 Gb/s
    # interface carries it.
    hosts = tuple(Host(f"pc{i}", "sw", 1000 * MB) for i in range(2))
    topology = Topology(
        (VirtualNode("a"), VirtualNode("b")), (VirtualLink("big", "a", "b", 2000 * MB),)
    )
    with pytest.raises(UserError, match=r"host pc\d's 1Gb/s interface would carry 2Gb/s"):
        map_topology(topology, Bed(hosts, ("sw",)))


def test_additive_desires_a_host_one_type_at_a_time_and_subnodes():
    hosts = (
        Host("h0", "sw", 1000 * MB, types={"pc": 4, "pcvm": 4}, features={"?+cores": 2.0}),
        Host("h1", "sw", 1000 * MB, types={"pc": 4, "pcvm": 4}, features={"?+cores": 2.0}),
        Host("card", "sw", 1000 * MB, types={"nic": 1}, subnode_of="h1"),
        Host("h2", "sw", 1000 * MB, types={"pc": 4, "pcvm": 4}),
    )
    nodes = (
        VirtualNode("a", desires={"?+cores": 1.5}),
        VirtualNode("b", desires={"?+cores": 1.5}),
        VirtualNode("vm", types=("pcvm",)),
        VirtualNode("sub", types=("nic",), subnode_of="b"),
    )
    links = (VirtualLink("ab", "a", "b", MB), VirtualLink("avm", "a", "vm", MB))
    topology, bed = Topology(nodes, links), Bed(hosts, ("sw",))
    mapping = map_topology(topology, bed)
    assert mapping.hosts["a"] != mapping.hosts["b"]  # 1.5 + 1.5 cores > 2
    assert mapping.hosts["b"] == "h1" and mapping.hosts["sub"] == "card"
    # vm is a pcvm: it cannot share a host that is being a pc.
    assert mapping.hosts["vm"] not in (mapping.hosts["a"], mapping.hosts["b"])
    assert evaluate(topology, bed, mapping.hosts, {}).valid


def test_the_link_emulators_packet_rate_and_loopback_bandwidth_bound_a_host():
    # Two shaped 100 Mb/s links need 2 × 2 × 8 333 packets/s inside one host: a host that
    # carries 30 000 cannot take all three nodes, nor can a loopback of 150 Mb/s; one node
    # goes to the one-slot host.
    for host in (
        Host("h0", "sw", 1000 * MB, types={"pc": 3}, linkd_pps=30_000),
        Host("h0", "sw", 1000 * MB, types={"pc": 3}, trivial_bps=150 * MB),
    ):
        other = Host("h1", "sw", 1000 * MB, types={"pc": 1})
        nodes = tuple(VirtualNode(n) for n in "abc")
        links = (VirtualLink("ab", "a", "b", 100 * MB), VirtualLink("bc", "b", "c", 100 * MB))
        mapping = map_topology(Topology(nodes, links), Bed((host, other), ("sw",)))
        assert len(set(mapping.hosts.values())) == 2
