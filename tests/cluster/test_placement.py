"""A swap-in plan as the mapper's problem on a cluster's hosts, without root."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nbtest import build
from nestbed.backend.cluster import placement
from nestbed.backend.cluster.placement import HostFacts, place, topology_of_plan
from nestbed.backend.plan import plan
from nestbed.errors import Held, UserError
from nestbed.mapper.fromir import UNLIMITED_ESTIMATE_BPS
from nestbed.mapper.hostsfile import CORES

DUMBBELL = """
routing: static
nodes: [{name: h1, cpu: 0.5}, {name: r1}, {name: r2}, {name: h3}]
links:
  - {name: access1, members: [h1, r1]}
  - {name: bottleneck, members: [r1, r2], bandwidth: 10Mb, delay: 20ms}
  - {name: access3, members: [r2, h3]}
lans: [{name: lan0, members: [r2, h3], bandwidth: 5Mb}]
"""


def hosts(slots: int, count: int = 2) -> list[HostFacts]:
    return [HostFacts(f"pc{i}", f"10.0.0.{i}", 4, 1 << 30, slots, 10**9) for i in range(count)]


def test_the_plan_is_the_experiment_as_the_mapper_sees_it():
    topology = topology_of_plan(plan(build(DUMBBELL)))
    assert [n.name for n in topology.nodes] == ["h1", "r1", "r2", "h3"]
    assert topology.nodes[0].desires == {CORES: 0.5}
    links = {link.name: link for link in topology.links}
    assert (links["bottleneck"].a, links["bottleneck"].b) == ("r1", "r2")
    assert links["bottleneck"].bandwidth_bps == 10_000_000 and links["bottleneck"].shaped
    assert links["access1"].bandwidth_bps == UNLIMITED_ESTIMATE_BPS
    assert not links["access1"].shaped
    (lan,) = topology.lans  # two members, still a LAN
    assert [(m.node, m.bandwidth_bps) for m in lan.members] == [
        ("r2", 5_000_000),
        ("h3", 5_000_000),
    ]


def test_two_nodes_a_host_cut_the_dumbbell_at_its_slowest_link():
    no_lan = DUMBBELL.replace("lans: [{name: lan0, members: [r2, h3], bandwidth: 5Mb}]", "")
    placed = place(plan(build(no_lan)), hosts(2))
    assert placed["h1"] == placed["r1"] != placed["r2"] == placed["h3"]


def test_hosts_too_small_for_the_experiment_say_so():
    with pytest.raises(
        UserError, match="4 nodes of type pc need 4 pc slots but the testbed has only 3"
    ):
        place(plan(build(DUMBBELL)), hosts(1, count=3))


def test_the_testbed_is_the_agents_hosts_on_one_switch():
    bed = placement.testbed_of(hosts(3)[::-1])
    assert [h.name for h in bed.hosts] == ["pc0", "pc1"]
    assert {h.switch for h in bed.hosts} == set(bed.switches)
    assert bed.hosts[0].types == {"pc": 3} and bed.hosts[0].features[CORES] == 4.0
    assert bed.hosts[0].linkd_pps is None


def test_hosts_whose_link_emulators_are_slow_share_the_shaped_links():
    # Two links of the dumbbell are shaped at 10 Mb/s (833 packets/s of 1500 bytes a
    # direction); an emulator carrying 3000 packets/s cannot take both (3333) on one host.
    shaped = DUMBBELL.replace("{name: access1, members: [h1, r1]}",
                              "{name: access1, members: [h1, r1], bandwidth: 10Mb}")  # fmt: skip
    slow = [HostFacts(f"pc{i}", f"10.0.0.{i}", 4, 1 << 30, 8, 10**9, linkd_pps=3000)
            for i in range(2)]  # fmt: skip
    assert len(set(place(plan(build(shaped)), slow).values())) == 2
    fast = [replace(h, linkd_pps=None) for h in slow]
    assert len(set(place(plan(build(shaped)), fast).values())) == 1


def test_the_simulated_part_is_one_node_to_the_mapper_placed_beside_an_emulated_one():
    from nbtest import EXAMPLES
    from nestbed.backend.cluster.placement import SIMULATOR

    p = plan(build((EXAMPLES / "hybrid.yaml").read_text()))
    topology = topology_of_plan(p)
    assert [n.name for n in topology.nodes] == ["h1", "h2", SIMULATOR]
    ends = {link.name: {link.a, link.b} for link in topology.links}
    assert ends == {"attach1": {"h1", SIMULATOR}, "attach2": {"h2", SIMULATOR}}
    # Two a host: the simulator takes a slot, beside one of the hosts it is attached to.
    placed = place(p, hosts(2))
    assert placed["r1"] == placed["r2"] in {placed["h1"], placed["h2"]}
    assert placed["h1"] != placed["h2"]
    assert SIMULATOR not in placed


def test_slots_other_experiments_hold_are_not_placed_in():
    no_lan = DUMBBELL.replace("lans: [{name: lan0, members: [r2, h3], bandwidth: 5Mb}]", "")
    busy = [replace(h, held=2 if h.name == "pc0" else 0) for h in hosts(2, count=3)]
    placed = place(plan(build(no_lan)), busy)
    assert "pc0" not in placed.values()
    assert sorted(placed.values()).count("pc1") == 2 == sorted(placed.values()).count("pc2")


def test_an_experiment_that_fits_but_for_others_says_they_hold_the_slots():
    busy = [replace(h, held=1) for h in hosts(2, count=3)]  # 3 of 6 free, 4 nodes
    with pytest.raises(Held) as caught:  # what a sweep's point waits on
        place(plan(build(DUMBBELL)), busy)
    assert str(caught.value) == (
        "experiment t does not fit in the slots other experiments leave on the cluster "
        "(3 of its 6 node slots are held): swap one of them out, or try again when one has ended"
    )


def test_an_experiment_too_large_for_the_hosts_says_so_whatever_others_hold():
    busy = [replace(h, held=1) for h in hosts(1, count=3)]
    with pytest.raises(UserError, match="need 4 pc slots but the testbed has only 3"):
        place(plan(build(DUMBBELL)), busy)
