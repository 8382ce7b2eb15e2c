"""A host's share of an experiment on several hosts: what it builds, computed without root."""

from __future__ import annotations

import pytest
from simulated import DUMBBELL

from nbtest import EXAMPLES, build
from nestbed.backend.cluster.host import typical_one_way_s
from nestbed.backend.cluster.share import (
    TUNNEL_PORT,
    Underlay,
    check_placement,
    cut_links,
    kernel_end,
    less_delay,
    mtu_warning,
    share,
    shares,
    vni,
)
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem, UserError

LEFT_RIGHT = {"h1": "left", "r1": "left", "r2": "right", "h3": "right"}
UNDERLAY = Underlay({"left": "10.221.0.1", "right": "10.221.0.2", "third": "10.221.0.3"})


def test_each_host_builds_its_own_nodes_with_the_one_host_routes_and_names():
    p = plan(build(DUMBBELL))
    left, right = (share(p, LEFT_RIGHT, h, UNDERLAY) for h in ("left", "right"))
    assert [n.name for n in left.plan.nodes] == ["h1", "r1"]
    assert [n.name for n in right.plan.nodes] == ["r2", "h3"]
    for part in (left, right):
        for node in part.plan.nodes:
            assert node == p.node(node.name)  # routes, /etc/hosts, interfaces, sysctls
    assert left.plan.fabric != right.plan.fabric  # one machine may simulate both hosts
    assert set(left.plan.namespaces).isdisjoint(right.plan.namespaces)
    # Every veth of the one-host plan is built on exactly one host, names unchanged.
    names = {(v.link, e.ifname) for s in (left, right) for v in s.plan.veths for e in (v.a, v.b)}
    assert names == {(v.link, e.ifname) for v in p.veths for e in (v.a, v.b)}


def test_a_shaped_cut_link_is_shaped_on_the_sending_side_and_tunnelled_once():
    p = plan(build(DUMBBELL))
    left, right = (share(p, LEFT_RIGHT, h, UNDERLAY) for h in ("left", "right"))
    assert cut_links(p, LEFT_RIGHT) == {"bottleneck": {"left", "right"}}
    for part, node, remote in ((left, "r1", "10.221.0.2"), (right, "r2", "10.221.0.1")):
        (link,) = part.plan.emulated
        local, tunnel_port = link.ports
        assert local.port == node and local.egress["delay"]["delay_ns"] == 20_000_000
        assert local.egress["bandwidth"]["rate_bps"] == 10_000_000
        assert (tunnel_port.port, tunnel_port.egress, tunnel_port.ingress) == (TUNNEL_PORT, {}, {})
        (tunnel,) = part.tunnels
        assert tunnel.remotes == (remote,)
        # linkd sends into the tunnel through its feed; what arrives is shaped already and
        # goes to the node's port by the kernel, not through linkd a second time.
        assert tunnel_port.ifname == tunnel.feed != tunnel.ifname
        assert tunnel.deliver == local.ifname
        assert len({tunnel.ifname, tunnel.feed, kernel_end(tunnel.feed)}) == 3
        assert tunnel.vni == vni(p.experiment, "bottleneck") and tunnel.port == 14789
        assert tunnel.bridge is None and tunnel.mtu == 1450
        # Both ends of the node's veth on the cut link carry the inner MTU; nothing else does.
        assert {(ns.split("-")[-1], ifname) for ns, ifname, _ in part.mtus} == {
            (node, part.plan.interfaces()[("bottleneck", node)]),
            (part.plan.fabric.split("-")[-1], local.ifname),
        }
        assert {mtu for *_, mtu in part.mtus} == {1450}


def test_a_cut_link_carries_what_a_local_one_does_on_a_jumbo_underlay_and_1450_on_1500():
    p = plan(build(DUMBBELL))
    cut = cut_links(p, LEFT_RIGHT)
    for mtu, link_mtu in ((9000, 1500), (1550, 1500), (1500, 1450), (1400, 1350)):
        underlay = Underlay(UNDERLAY.addresses, mtu=mtu)
        part = share(p, LEFT_RIGHT, "left", underlay)
        assert {t.mtu for t in part.tunnels} == {link_mtu}
        assert {m for *_, m in part.mtus} == {link_mtu}
        warning = mtu_warning(p, cut, underlay)
        assert (warning is None) == (link_mtu == 1500)
    assert mtu_warning(p, cut, Underlay(UNDERLAY.addresses, mtu=1500)) == (
        f"the links of experiment {p.experiment} cut between hosts (bottleneck) carry packets "
        "of at most 1450 bytes, a link on one host 1500: the underlay's MTU 1500 less VXLAN's "
        "50; give the underlay an MTU of 1550 or more (jumbo frames, docs/cluster.md) to carry "
        "1500"
    )
    assert mtu_warning(p, {}, Underlay(UNDERLAY.addresses, mtu=1500)) is None


def test_an_unshaped_cut_link_is_bridged_to_its_tunnel():
    p = plan(build(DUMBBELL.replace(", bandwidth: 10Mb, delay: 20ms", "")))
    assert not p.emulated
    left = share(p, LEFT_RIGHT, "left", UNDERLAY)
    (bridge,) = left.plan.bridges
    (tunnel,) = left.tunnels
    assert tunnel.bridge == bridge.ifname and bridge.netns == left.plan.fabric
    (veth,) = [v for v in left.plan.veths if v.link == "bottleneck"]
    assert veth.a.netns == p.node("r1").netns and veth.b.ifname in bridge.ports
    assert left.plan.fabric in left.plan.namespaces


def test_a_lan_over_three_hosts_reaches_the_two_others_and_a_host_without_it_has_no_tunnel():
    exp = build("""
        nodes: [{name: a}, {name: b}, {name: c}, {name: d}]
        links: [{name: cd, members: [c, d]}]
        lans: [{name: lan0, members: [a, b, c]}]
    """)
    p = plan(exp)
    placement = {"a": "left", "b": "right", "c": "third", "d": "third"}
    parts = shares(p, placement, UNDERLAY)
    assert parts["left"].tunnels[0].remotes == ("10.221.0.2", "10.221.0.3")
    assert [t.link for t in parts["third"].tunnels] == ["lan0"]
    assert [b.ports for b in parts["third"].plan.bridges] == [("l1p2",)]
    assert not any(v.link == "lan0" and v.a.netns.endswith("-d") for v in parts["third"].plan.veths)


def test_a_placement_the_shares_cannot_be_built_from_is_one_sentence():
    p = plan(build(DUMBBELL))
    with pytest.raises(UserError, match=r"node h3 of experiment .* is placed on no host"):
        check_placement(p, {"h1": "left", "r1": "left", "r2": "right"}, UNDERLAY)
    with pytest.raises(UserError, match="host nowhere has no underlay address"):
        share(p, {**LEFT_RIGHT, "h3": "nowhere"}, "left", UNDERLAY)
    with pytest.raises(UserError, match="leaves 450 bytes inside VXLAN"):
        share(p, LEFT_RIGHT, "left", Underlay(UNDERLAY.addresses, mtu=500))


def test_all_on_one_host_is_the_one_host_plan_but_for_the_fabric_name():
    p = plan(build(DUMBBELL))
    one = share(p, dict.fromkeys(LEFT_RIGHT, "left"), "left", UNDERLAY)
    assert not one.tunnels and not one.mtus
    assert one.plan.nodes == p.nodes and one.plan.emulated == p.emulated
    assert len(one.plan.veths) == len(p.veths)


def test_a_shaped_lan_keeps_each_members_pipes_on_its_own_host_and_the_port_is_configurable():
    exp = build("""
        lans: [{name: lan0, members: [a, b, c], delay: 10ms, bandwidth: 10Mb}]
        nodes: [{name: a}, {name: b}, {name: c}]
    """)
    p = plan(exp)
    underlay = Underlay(UNDERLAY.addresses, port=4789)
    parts = shares(p, {"a": "left", "b": "left", "c": "right"}, underlay)
    (one,) = p.emulated
    by_port = {port.port: port for port in one.ports}
    for part in parts.values():
        (link,) = part.plan.emulated
        assert link.lan and link.seed == one.seed
        *members, tunnel_port = link.ports
        assert tunnel_port.port == TUNNEL_PORT
        # A frame leaves through its sender's egress half here and, on the far side, meets
        # its receiver's ingress half there: each half once.
        assert all(m == by_port[m.port] for m in members)
        assert part.tunnels[0].port == 4789
    assert [m.port for m in parts["left"].plan.emulated[0].ports] == ["a", "b", TUNNEL_PORT]


def test_a_cut_links_sending_pipe_gives_up_the_underlays_time_to_the_other_host():
    p = plan(build(DUMBBELL))
    delays = {"left": {"right": 0.0006}, "right": {"left": 0.0004}}
    underlay = Underlay(UNDERLAY.addresses, delays_s=delays)
    for host, node, delay_ns in (("left", "r1", 19_400_000), ("right", "r2", 19_600_000)):
        part = share(p, LEFT_RIGHT, host, underlay)
        (link,) = part.plan.emulated
        local = link.ports[0]
        assert local.egress["delay"]["delay_ns"] == delay_ns
        assert local.egress["bandwidth"]["rate_bps"] == 10_000_000  # the rest as it was
        other = "right" if host == "left" else "left"
        assert part.compensated == (("bottleneck", node, delays[host][other]),)


def test_less_delay_never_goes_below_zero_and_leaves_an_undelayed_pipe_alone():
    assert less_delay({"delay": {"delay_ns": 300_000, "jitter_ns": 5}}, 0.001) == {
        "delay": {"delay_ns": 0, "jitter_ns": 5}
    }
    assert less_delay({"bandwidth": {"rate_bps": 1}}, 0.001) == {"bandwidth": {"rate_bps": 1}}


def test_the_underlays_time_given_up_is_half_the_median_round_trip_not_the_least_or_mean():
    # A crossing held up by a busy host pulls the mean far up; the least is below what
    # nearly every frame takes.
    replies = [0.412, 0.530, 0.560, 0.575, 21.904]
    output = (
        "PING 10.9.0.2 (10.9.0.2) 56(84) bytes of data.\n"
        + "".join(
            f"64 bytes from 10.9.0.2: icmp_seq={i} ttl=64 time={t} ms\n"
            for i, t in enumerate(replies, 1)
        )
        + "\n--- 10.9.0.2 ping statistics ---\nrtt min/avg/max/mdev = 0.412/4.796/21.904/8.5 ms\n"
    )
    assert typical_one_way_s(output, "10.9.0.2") == pytest.approx(0.000280)
    with pytest.raises(EnvironmentProblem, match=r"to 10\.9\.0\.2 failed: no echo came back"):
        typical_one_way_s("--- 10.9.0.2 ping statistics ---\n", "10.9.0.2")


HYBRID = (EXAMPLES / "hybrid.yaml").read_text()
# The simulated part (r1, r2) beside h1; h2's attachment is cut.
SIM_LEFT = {"h1": "left", "r1": "left", "r2": "left", "h2": "right"}


def test_the_simulated_part_is_on_its_hosts_share_and_a_shaped_attachment_to_another_is_cut():
    p = plan(build(HYBRID))
    assert cut_links(p, SIM_LEFT) == {"attach2": {"left", "right"}}
    left, right = (share(p, SIM_LEFT, h, UNDERLAY) for h in ("left", "right"))
    assert right.plan.simulation is None
    # The same simulated part, its cut attachment's device told the tunnel's inner MTU.
    assert left.plan.simulation.nodes == p.simulation.nodes
    assert {a.link: a.mtu for a in left.plan.simulation.attachments} == {
        "attach1": None,
        "attach2": 1450,
    }
    assert "attach attach2 r2 " in left.plan.simulation.description({"attach1": 7, "attach2": 8})
    assert left.plan.simulation.description({"attach1": 7, "attach2": 8}).count(" 8 1450\n") == 1
    # nestbed-sim reads each attachment's interface in its host's fabric, where it is built.
    ends = {(e.netns, e.ifname) for v in left.plan.veths for e in (v.a, v.b)}
    assert {(left.plan.fabric, a.ifname) for a in p.simulation.attachments} <= ends
    # attach2 is shaped on each side by its sender's pipes, then tunnelled: r2's egress on
    # the simulator's host, h2's on its own.
    for part, member in ((left, "r2"), (right, "h2")):
        (link,) = [e for e in part.plan.emulated if e.link == "attach2"]
        assert [port.port for port in link.ports] == [member, TUNNEL_PORT]
        assert link.ports[0].egress["bandwidth"]["rate_bps"] == 100_000_000
        (tunnel,) = part.tunnels
        assert tunnel.link == "attach2" and tunnel.bridge is None
    assert [n.name for n in right.plan.nodes] == ["h2"]
    assert [e.link for e in left.plan.emulated] == ["attach1", "attach2"]


def test_an_unshaped_attachment_to_another_host_bridges_the_simulators_end_to_its_tunnel():
    p = plan(build(HYBRID.replace(", bandwidth: 100Mb, simulated: true}", ", simulated: true}")))
    assert not p.emulated
    left, right = (share(p, SIM_LEFT, h, UNDERLAY) for h in ("left", "right"))
    (attachment,) = [a for a in p.simulation.attachments if a.link == "attach2"]
    for part, end in ((left, attachment.ifname), (right, None)):
        (bridge,) = part.plan.bridges
        (tunnel,) = part.tunnels
        assert tunnel.bridge == bridge.ifname
        (veth,) = [v for v in part.plan.veths if v.link == "attach2"]
        assert veth.b.ifname in bridge.ports and veth.b.no_offloads == (end is not None)
        if end is not None:  # the simulator's own end, whole frames
            assert (veth.a.netns, veth.a.ifname, veth.a.no_offloads) == (
                part.plan.fabric,
                end,
                True,
            )
        else:
            assert veth.a.netns == p.node("h2").netns
    # The names a cut adds are none of the plan's own (whose numbers count simulated links).
    for part in (left, right):
        names = [
            e.ifname for v in part.plan.veths for e in (v.a, v.b) if e.netns == part.plan.fabric
        ] + [b.ifname for b in part.plan.bridges]
        names += [t.ifname for t in part.tunnels]
        assert len(names) == len(set(names)), names


def test_simulated_nodes_placed_on_two_hosts_are_refused():
    p = plan(build(HYBRID))
    with pytest.raises(UserError, match=r"simulated nodes of experiment .* more than one host"):
        share(p, {**SIM_LEFT, "r2": "right"}, "left", UNDERLAY)
