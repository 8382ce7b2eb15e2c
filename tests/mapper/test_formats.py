"""Emulab's .top and .ptop files and nestbed's hosts.yaml: read, written back, read again the
same; the IR as a mapping problem; and infeasible problems refused with their reason."""

from __future__ import annotations

import dataclasses

import pytest

from nbtest import EXAMPLES
from nestbed.errors import UserError
from nestbed.mapper import Host, Topology, VirtualLink, VirtualNode, map_topology
from nestbed.mapper import Testbed as Bed
from nestbed.mapper import generate as g
from nestbed.mapper.emulab import parse_ptop, parse_top, write_ptop, write_top
from nestbed.mapper.fromir import topology_of
from nestbed.mapper.hostsfile import parse_hosts
from nestbed.spec import load

MB = g.MB

PTOP = """\
node sw0 switch:1 *lan:*
node sw1 switch:1 *lan:*
node pc1 pc:1 pcvm:10 *delay:* - ?+cpu:2000 *&shared:0.5 OS-FBSD:0 - trivial_bw:400000 unique
node pc2 pc3000:1 - *!first:1 - subnode_of:pc1
link link-pc1 pc1:00aa/eth0 sw0:(null)/(null) 100000 0 0 ethernet
link link-pc2a pc2:00bb/eth0 sw1:(null)/(null) 100000 0 0 1 ethernet
link link-pc2b pc2:00cc/eth1 sw1:(null)/(null) 100000 0 0 ethernet
link trunk0 sw0:(null)/(null) sw1:(null)/(null) 1000000 0 0 ethernet
set-type-limit pc3000 4
policy desire OS-WIN disallow
policy desire ?+cpu limit 1500
"""

TOP = """\
make-vclass hw 0.5 pc pc3000
node a pc ?+cpu:500 OS-FBSD:1
node b hw
node c pcvm:2 subnode_of:a
node lan0 lan
link l0 a b 100000 0 0 ethernet trivial_ok
link l1 a:x/eth0 lan0 10000 0 0 ethernet emulated
link l2 c lan0 10000:0:0 0 0 ethernet
fix-node a pc1
node-hint b pc2
"""


def test_ptop_is_read_as_assign_reads_it():
    bed = parse_ptop(PTOP)
    pc1, pc2 = bed.hosts
    assert bed.switches == ("sw0", "sw1")
    assert pc1.types == {"pc": 1, "pcvm": 10} and pc1.static_types == {"delay": 10_000}
    assert pc1.features == {"?+cpu": 2000.0, "*&shared": 0.5, "OS-FBSD": 0.0}
    assert pc1.trivial_bps == 400_000_000 and pc1.unique and pc1.uplink == "link-pc1"
    assert (pc1.switch, pc1.nic_bps) == ("sw0", 100_000_000)
    # Two interfaces to one switch add up; an old-style slots column is skipped.
    assert (pc2.switch, pc2.nic_bps, pc2.subnode_of) == ("sw1", 200_000_000, "pc1")
    assert [(t.name, t.bandwidth_bps) for t in bed.trunks] == [("trunk0", 1_000_000_000)]
    assert bed.type_limits == {"pc3000": 4}
    assert bed.disallowed_desires == {"OS-WIN"} and bed.desire_limits == {"?+cpu": 1500.0}


def test_top_is_read_as_assign_reads_it():
    top = parse_top(TOP)
    a, b, c = top.nodes
    assert a.desires == {"?+cpu": 500.0, "OS-FBSD": 1.0} and a.fixed == "pc1"
    assert b.types == ("pc", "pc3000") and (c.types, c.slots, c.subnode_of) == (("pcvm",), 2, "a")
    (link,) = top.links
    assert (link.a, link.b, link.bandwidth_bps, link.trivial_ok) == ("a", "b", 100 * MB, True)
    (lan,) = top.lans
    assert [(m.node, m.bandwidth_bps, m.link) for m in lan.members] == [
        ("a", 10 * MB, "l1"),
        ("c", 10 * MB, "l2"),
    ]


@pytest.mark.parametrize("text", [TOP, write_top(g.lan(5)), write_top(g.tree(9))])
def test_top_round_trips(text):
    first = parse_top(text)
    assert parse_top(write_top(first)) == first


def _without_cores(bed: Bed) -> Bed:
    # A .ptop has no cores: only the additive ?+ features that stand for them.
    return dataclasses.replace(bed, hosts=tuple(dataclasses.replace(h, cores=0) for h in bed.hosts))


@pytest.mark.parametrize("bed", [parse_ptop(PTOP), _without_cores(g.testbed(3, 4, slots=2))])
def test_ptop_round_trips(bed):
    again = parse_ptop(write_ptop(bed))
    assert again == bed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node a pc\nfrob x\n", "ptop:2: unknown directive 'frob'"),
        ("node a pc:x\n", "ptop:1: the slot count 'x' is not a number"),
        (
            "node s switch\nnode a pc\nlink l a s 0 0 0 ethernet\n",
            "ptop:3: link l has no bandwidth",
        ),
        (
            "node a pc\nnode b pc\nlink l a b 10 0 0\n",
            "ptop:3: link l joins hosts a and b directly",
        ),
        ("node a pc - - wobbly\n", "ptop:1: unknown node flag 'wobbly'"),
        ("policy desire x maybe\n", "ptop:1: write `policy desire NAME disallow`"),
    ],
)
def test_bad_ptop_lines_are_named(text, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("`", ".")):
        parse_ptop(text)


def test_bad_top_lines_are_named():
    with pytest.raises(UserError, match=r"top:2: link l names node z, not defined"):
        parse_top("node a pc\nlink l a z 10 0 0\n")


def test_hosts_yaml_expands_counts_and_turns_cores_and_memory_into_features():
    bed = parse_hosts(
        "trunks: [{between: [sw0, core], bandwidth: 10Gb}]\n"
        "hosts:\n"
        "  - {name: pc, count: 3, switch: sw0, cores: 4, memory: 8GB, nic: 1Gb}\n"
        "  - {name: big, types: {pc3000: 2}, features: {gpu: 0}, linkd_pps: 1000}\n"
    )
    assert [h.name for h in bed.hosts] == ["pc0", "pc1", "pc2", "big"]
    pc = bed.hosts[0]
    assert pc.types == {"pc": 32} and pc.cores == 4
    assert pc.features == {"?+cores": 4.0, "?+memory_bytes": 8e9}
    assert bed.hosts[3].switch == "switch" and bed.hosts[3].linkd_pps == 1000
    assert bed.trunks[0].bandwidth_bps == 10_000 * MB


def test_hosts_yaml_mistakes_are_one_sentence():
    with pytest.raises(UserError, match=r"h.yaml: hosts.0.colour: Extra inputs"):
        parse_hosts("hosts: [{name: a, colour: red}]\n", "h.yaml")
    with pytest.raises(UserError, match=r"h.yaml: .*bandwidth"):
        parse_hosts("hosts: [{name: a, nic: fast}]\n", "h.yaml")


def test_the_ir_gives_types_fixed_hosts_cpu_and_bandwidth():
    topology = topology_of(load(EXAMPLES / "dumbbell.yaml").experiment)
    assert len(topology.nodes) == 6
    bottleneck = next(x for x in topology.links if x.name == "bottleneck")
    assert bottleneck.bandwidth_bps == 10 * MB and bottleneck.shaped
    lan = topology_of(load(EXAMPLES / "lan.yaml").experiment).lans[0]
    rates = {m.node: m.bandwidth_bps for m in lan.members}
    assert rates["far"] == 10 * MB and rates["n-1"] == 100 * MB


HOSTS = (
    Host("pc0", "sw", 1000 * MB, types={"pc": 2}, features={"?+cores": 2.0}),
    Host("pc1", "sw", 1000 * MB, types={"pc": 2}, features={"?+cores": 2.0}),
)


@pytest.mark.parametrize(
    ("nodes", "bed", "message"),
    [
        (
            (VirtualNode("h3", types=("pc3000",)),),
            Bed(HOSTS),
            "node h3 wants type pc3000 but no host has a pc3000 slot",
        ),
        (
            tuple(VirtualNode(f"n{i}") for i in range(5)),
            Bed(HOSTS),
            "the 5 nodes of type pc need 5 pc slots but the testbed has only 4",
        ),
        (
            (VirtualNode("a", fixed="pc9"),),
            Bed(HOSTS),
            "node a is fixed to host pc9, which the testbed lacks",
        ),
        (
            (VirtualNode("a", types=("pc3000",), fixed="pc0"),),
            Bed(HOSTS + (Host("x", "sw", 0, types={"pc3000": 1}),)),
            "node a is fixed to host pc0, which cannot take it: it has no free pc3000 slot",
        ),
        (
            (VirtualNode("a", desires={"gpu": 1.0}),),
            Bed(HOSTS),
            r"node a wants type pc, but no host of that type can take it \(host pc0: it lacks feature gpu\)",
        ),
        (
            (VirtualNode("a", desires={"?+cores": 3.0}),),
            Bed(HOSTS),
            r"host pc0: its \?\+cores is 2, below the 3 wanted",
        ),
        (
            (VirtualNode("a", desires={"OS-WIN": 0.5}),),
            Bed(HOSTS, disallowed_desires=frozenset({"OS-WIN"})),
            "node a desires OS-WIN, which the testbed's policy disallows",
        ),
        (
            tuple(VirtualNode(f"n{i}") for i in range(3)),
            Bed(HOSTS, type_limits={"pc": 1}),
            "the 3 nodes of type pc need at least 2 hosts of that type but the testbed's limit is 1",
        ),
    ],
)
def test_infeasible_problems_are_refused_with_their_reason(nodes, bed, message):
    with pytest.raises(UserError, match=message):
        map_topology(Topology(nodes), bed)


def test_a_lan_that_cannot_cross_the_trunks_is_refused_with_its_traffic():
    with pytest.raises(
        UserError,
        match=r"LAN lan0's 400 members of 100Mb/s cannot all sit on one switch.*"
        r"send 40Gb/s over its 8Gb/s of trunks",
    ):
        map_topology(g.lan(400), g.testbed(8, 64))


def test_links_between_unconnected_switches_are_refused():
    hosts = (Host("a", "s1", 1000 * MB), Host("b", "s2", 1000 * MB))
    topology = Topology((VirtualNode("x"), VirtualNode("y")), (VirtualLink("l", "x", "y", MB),))
    with pytest.raises(UserError, match="link l joins hosts a and b, which no switches"):
        map_topology(topology, Bed(hosts))
