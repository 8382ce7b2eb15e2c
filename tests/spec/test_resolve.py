"""The resolver: the meaning of an experiment document, and every error it reports."""

from __future__ import annotations

import math

import pytest

from nbtest import build
from nestbed.errors import SpecError


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        build(text)
    return [str(p) for p in info.value.problems]


TWO = """
nodes: [{name: a}, {name: b}]
"""


def test_link_shaping_applies_to_each_direction():
    exp = build(
        TWO + "links: [{name: l, members: [a, b], bandwidth: 10Mb, delay: 20ms, loss: 0.01}]"
    )
    a, b = exp.links[0].ports
    for port in (a, b):
        assert (port.egress.bandwidth_bps, port.egress.delay_s, port.egress.loss) == (
            10_000_000,
            0.02,
            0.01,
        )
        assert not port.ingress.is_shaped
    assert exp.links[0].is_shaped


def test_simplex_override_changes_one_direction_only():
    exp = build(
        TWO
        + """
links:
  - name: l
    members: [{node: a, egress: {delay: 50ms, bandwidth: 1Mb}}, b]
    bandwidth: 10Mb
    delay: 20ms
"""
    )
    a, b = exp.links[0].ports
    assert (a.egress.delay_s, a.egress.bandwidth_bps) == (0.05, 1_000_000)
    assert (b.egress.delay_s, b.egress.bandwidth_bps) == (0.02, 10_000_000)


def test_lan_delay_and_loss_are_split_between_the_two_halves():
    exp = build(
        """
nodes: [{name: a}, {name: b}, {name: c}]
lans: [{name: lan0, members: [a, b, c], bandwidth: 100Mb, delay: 10ms, loss: 0.19}]
"""
    )
    for port in exp.lans[0].ports:
        assert port.egress.delay_s + port.ingress.delay_s == pytest.approx(0.01)
        assert port.egress.bandwidth_bps == port.ingress.bandwidth_bps == 100_000_000
        end_to_end = 1 - (1 - port.egress.loss) * (1 - port.ingress.loss)
        assert end_to_end == pytest.approx(0.19)
        assert port.egress.loss == pytest.approx(1 - math.sqrt(0.81))


def test_lan_member_override_is_the_node_to_switch_value():
    exp = build(
        """
nodes: [{name: a}, {name: b}]
lans:
  - name: lan0
    members: [{node: a, egress: {delay: 40ms}, ingress: {delay: 40ms}}, b]
    delay: 10ms
"""
    )
    a, b = exp.lans[0].ports
    assert (a.egress.delay_s, a.ingress.delay_s) == (0.04, 0.04)
    assert (b.egress.delay_s, b.ingress.delay_s) == (0.005, 0.005)


def test_addresses_one_subnet_per_link_from_10_1_1_hosts_from_2():
    exp = build(
        """
nodes: [{name: a}, {name: b}, {name: c}]
links: [{members: [a, b]}, {members: [b, c]}]
lans: [{members: [a, b, c]}]
"""
    )
    assert [(p.node, p.ip) for p in exp.links[0].ports] == [("a", "10.1.1.2"), ("b", "10.1.1.3")]
    assert [p.ip for p in exp.links[1].ports] == ["10.1.2.2", "10.1.2.3"]
    assert [p.ip for p in exp.lans[0].ports] == ["10.1.3.2", "10.1.3.3", "10.1.3.4"]
    assert [x.name for x in exp.links] == ["link0", "link1"]
    assert exp.lans[0].name == "lan0"
    assert exp.links[0].subnet == "10.1.1.0/24"


def test_user_addresses_are_kept_and_their_subnets_skipped():
    exp = build(
        """
nodes: [{name: a}, {name: b}, {name: c}]
links:
  - {members: [a, b]}
  - {members: [{node: b, ip: 10.1.1.7}, c]}
"""
    )
    # link1 claims 10.1.1.0/24, so link0 gets the next free subnet; c joins b's subnet from .2.
    assert [p.ip for p in exp.links[0].ports] == ["10.1.2.2", "10.1.2.3"]
    assert [p.ip for p in exp.links[1].ports] == ["10.1.1.7", "10.1.1.2"]


def test_netmask_is_honoured():
    exp = build(TWO + "links: [{members: [a, b], netmask: 255.255.255.248}]")
    assert exp.links[0].subnet == "10.1.1.0/29"
    assert exp.links[0].ports[0].interface.network.prefixlen == 29


def test_duplicate_addresses_name_both_ports():
    assert problems(
        """
nodes: [{name: a}, {name: b}, {name: c}]
links:
  - {name: l1, members: [{node: a, ip: 10.9.0.1}, b]}
  - {name: l2, members: [{node: c, ip: 10.9.0.1}, b]}
"""
    ) == [
        "t.yaml:5: address 10.9.0.1 is given to both a on link l1 and c on link l2; change one of them",
    ]


ERRORS = [
    (
        "unknown node in a link",
        TWO + "links: [{name: l, members: [a, zz]}]",
        ["t.yaml:3: link l: member 'zz' does not exist; declare it or fix the name"],
    ),
    (
        "a link with three members",
        "nodes: [{name: a}, {name: b}, {name: c}]\nlinks: [{name: l, members: [a, b, c]}]",
        ["t.yaml:2: link l has 3 members; a link joins exactly two nodes (use a LAN for more)"],
    ),
    (
        "bad bandwidth unit",
        TWO + "links:\n  - name: l\n    members: [a, b]\n    bandwidth: 10MB\n",
        [
            "t.yaml:6: link l: bandwidth '10MB' has unknown unit 'MB'; write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted"
        ],
    ),
    (
        "loss above one",
        TWO + "links:\n  - name: l\n    members: [a, b]\n    loss: 1.5\n",
        [
            "t.yaml:6: link l: loss '1.5' is not between 0 and 1; write loss as a probability between 0 and 1 (for example 0.01 for 1 %)"
        ],
    ),
    (
        "invalid node name",
        "nodes: [{name: n_0}]",
        [
            "t.yaml:1: node name 'n_0' is not valid: names may contain only letters, digits and '-'; rename it"
        ],
    ),
    (
        "name used twice",
        "nodes: [{name: a}, {name: a}]",
        ["t.yaml:1: the name 'a' is used twice (a node and a node); give each object its own name"],
    ),
    (
        "unknown event object",
        TWO + "events:\n  - {at: 1, object: link9, verb: down}\n",
        [
            "t.yaml:4: event link9 down: there is no object named 'link9'; events act on nodes, links, LANs, agents, applications, programs, timelines, sequences, groups or ns"
        ],
    ),
    (
        "unknown event verb",
        TWO
        + "links: [{name: l, members: [a, b]}]\nevents:\n  - {at: 1, object: l, verb: explode}\n",
        [
            "t.yaml:5: event l explode: 'explode' is not a verb of link l; valid verbs are bandwidth, delay, down, plr, queue-set, reset, up"
        ],
    ),
    (
        "bad event argument",
        TWO
        + "links: [{name: l, members: [a, b]}]\nevents:\n  - {at: 1, object: l, verb: bandwidth, args: [10MB]}\n",
        [
            "t.yaml:5: event l bandwidth: bandwidth '10MB' has unknown unit 'MB'; write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted"
        ],
    ),
    (
        "bad event time",
        TWO + "events:\n  - {at: soon, object: ns, verb: halt}\n",
        [
            "t.yaml:4: event at soon: time 'soon' is not a valid time; write seconds (10.5) or hours, minutes and seconds (1h20m3s)"
        ],
    ),
    (
        "udp connected to a tcp sink",
        TWO
        + "agents:\n  - {name: u, type: udp, node: a, peer: s}\n  - {name: s, type: tcpsink, node: b, peer: u}\n",
        [
            "t.yaml:4: agent u (udp) is connected to s (tcpsink); connect UDP to a Null agent and TCP to a TCPSink",
            "t.yaml:5: agent s (tcpsink) is connected to u (udp); connect UDP to a Null agent and TCP to a TCPSink",
        ],
    ),
    (
        "ftp on udp",
        TWO
        + "agents: [{name: u, type: udp, node: a}]\napplications: [{name: f, type: ftp, agent: u}]\n",
        ["t.yaml:4: ftp f is attached to u, a udp agent; attach FTP to a TCP agent"],
    ),
    (
        "unknown key",
        "nodes: [{name: a, colour: red}]",
        ["t.yaml:1: unknown key 'colour' in nodes.0; remove it or check its spelling"],
    ),
    (
        "program on a missing node",
        TWO + "programs: [{name: p, node: zz, command: ls}]",
        ["t.yaml:3: program p: node 'zz' does not exist; declare it or fix the name"],
    ),
    (
        "both loss models",
        TWO
        + "links:\n  - {name: l, members: [a, b], loss: 0.1, gilbert_elliott: {loss_rate: 0.1, burst_length: 2}}\n",
        [
            "t.yaml:4: link l: both a loss probability and Gilbert-Elliott loss are set; use one loss model"
        ],
    ),
]


@pytest.mark.parametrize(("case", "text", "expected"), ERRORS, ids=[e[0] for e in ERRORS])
def test_error_messages(case, text, expected):
    assert problems(text) == expected


def test_every_error_is_gathered_before_failing():
    found = problems(
        """
nodes: [{name: a}, {name: b}]
links:
  - {name: l1, members: [a, x], bandwidth: 1MB}
  - {name: l2, members: [a, b], delay: -5ms}
events:
  - {at: 1, object: nothing, verb: up}
"""
    )
    assert len(found) == 4
    assert [p.split(":")[1] for p in found] == ["4", "4", "5", "7"]


def test_gilbert_elliott_from_loss_rate_and_burst_length():
    exp = build(
        TWO + "links: [{members: [a, b], gilbert_elliott: {loss_rate: 0.05, burst_length: 4}}]"
    )
    g = exp.links[0].ports[0].egress.gilbert_elliott
    q = 1 / 4
    assert (g.p, g.r, g.loss_bad, g.loss_good) == (pytest.approx(0.05 * q / 0.95), q, 1.0, 0.0)
    assert g.loss_rate == pytest.approx(0.05)


def test_queue_settings_and_red_validation():
    exp = build(
        TWO
        + "links: [{members: [a, b], queue: {type: gred, limit: 30000, limit_unit: bytes, thresh: 3, maxthresh: 9}}]"
    )
    q = exp.links[0].ports[0].egress.queue
    assert (q.kind, q.limit, q.limit_unit, q.thresh, q.maxthresh, q.gentle) == (
        "gred",
        30000,
        "bytes",
        3,
        9,
        True,
    )
    found = problems(
        TWO + "links: [{name: l, members: [a, b], queue: {type: red, thresh: 20, maxthresh: 10}}]"
    )
    assert found == [
        "t.yaml:3: link l: queue queue: Value error, RED maxthresh 10.0 is below thresh 20.0; set maxthresh_ at least as large as thresh_"
    ]


def test_manual_routes_resolve_to_prefixes_and_next_hops():
    exp = build(
        """
routing: manual
nodes:
  - {name: a, routes: [{dst: c, via: b}, {dst: l2, via: b}]}
  - {name: b}
  - {name: c}
links: [{name: l1, members: [a, b]}, {name: l2, members: [b, c]}]
"""
    )
    routes = exp.node("a").routes
    assert [(r.destination, r.via) for r in routes] == [
        ("10.1.2.3/32", "10.1.1.3"),
        ("10.1.2.0/24", "10.1.1.3"),
    ]


def test_route_via_a_node_that_is_not_a_neighbour():
    found = problems(
        """
routing: manual
nodes:
  - {name: a, routes: [{dst: c, via: c}]}
  - {name: b}
  - {name: c}
links: [{name: l1, members: [a, b]}, {name: l2, members: [b, c]}]
"""
    )
    assert found == [
        "t.yaml:4: route on node a: next hop c shares no link or LAN with a; use a directly connected node"
    ]


def test_events_are_sorted_by_time_keeping_file_order_for_ties():
    exp = build(
        TWO
        + """
links: [{name: l, members: [a, b]}]
events:
  - {at: 5, object: l, verb: up}
  - {at: 1h, object: ns, verb: halt}
  - {at: 1, object: l, verb: down}
  - {at: 5, object: l, verb: delay, args: [10ms]}
"""
    )
    assert [(e.time_s, e.verb) for e in exp.events] == [
        (1, "down"),
        (5, "up"),
        (5, "delay"),
        (3600, "halt"),
    ]


def test_groups_take_the_verbs_of_their_members():
    exp = build(
        """
nodes: [{name: a}, {name: b}, {name: c}]
links: [{name: l1, members: [a, b]}, {name: l2, members: [b, c]}]
groups: [{name: g, members: [l1, l2]}]
events: [{at: 1, object: g, verb: down}]
"""
    )
    assert exp.groups[0].members == ("l1", "l2")
    mixed = problems(
        """
nodes: [{name: a}, {name: b}]
links: [{name: l1, members: [a, b]}]
groups: [{name: g, members: [l1, a]}]
"""
    )
    assert mixed == ["t.yaml:4: group g mixes link, node; a group holds objects of one kind"]


def test_cbr_defaults_follow_ns2_and_emulab():
    exp = build(
        TWO
        + "agents: [{name: u, type: udp, node: a}]\napplications: [{name: c, type: cbr, agent: u}]"
    )
    cbr = exp.applications[0]
    assert (cbr.packet_size_bytes, cbr.rate_bps, cbr.interval_s) == (210, 100_000_000, None)


def test_inert_commands_are_kept_and_warned_about():
    exp = build(TWO + "inert: [{command: tb-set-node-rpms, args: [a, foo.rpm]}]")
    assert exp.inert[0].command == "tb-set-node-rpms"
    assert [w.message for w in exp.warnings] == [
        "tb-set-node-rpms has no effect here (nodes share the host's file system, so nothing is installed); it is recorded in the experiment and otherwise ignored"
    ]


def test_same_document_same_bytes():
    text = TWO + "links: [{members: [a, b], bandwidth: 10Mb, delay: 20ms}]"
    assert build(text).to_json() == build(text).to_json()


def test_only_network_sysctls_are_per_node():
    found = problems(
        TWO.replace(
            "{name: a}", "{name: a, sysctls: {kernel.core_pattern: x, net.ipv4./etc/passwd: y}}"
        )
    )
    assert found == [
        "t.yaml:2: node a: sysctl 'kernel.core_pattern' is not a per-node network setting; only net.* keys (for example net.ipv4.tcp_congestion_control) apply to one node",
        "t.yaml:2: node a: sysctl 'net.ipv4./etc/passwd' is not a per-node network setting; only net.* keys (for example net.ipv4.tcp_congestion_control) apply to one node",
    ]
    exp = build(TWO.replace("{name: a}", "{name: a, sysctls: {net.ipv4.tcp_ecn: 1}}"))
    assert exp.node("a").sysctls == {"net.ipv4.tcp_ecn": "1"}


def test_cbr_rate_zero_is_an_error_not_the_default():
    found = problems(
        TWO
        + "agents: [{name: u, type: udp, node: a}]\napplications: [{name: c, type: cbr, agent: u, rate: 0}]"
    )
    assert found == [
        "t.yaml:4: cbr c: rate 0 would send nothing; give a positive rate or an interval"
    ]


def test_a_slash_30_link_numbers_its_two_hosts_from_1():
    exp = build(TWO + "links: [{members: [a, b], netmask: 255.255.255.252}]")
    assert [p.ip for p in exp.links[0].ports] == ["10.1.1.1", "10.1.1.2"]


def test_automatic_link_names_skip_every_name_in_use():
    exp = build("nodes: [{name: link0}, {name: b}]\nlinks: [{members: [link0, b]}]")
    assert exp.links[0].name == "link1"


def test_queue_set_event_on_an_unnamed_link_and_one_sided_peers():
    exp = build(
        TWO
        + "links: [{members: [a, b]}]\n"
        + "agents: [{name: u, type: udp, node: a, peer: n}, {name: n, type: null, node: b}]\n"
        + "events: [{at: 1, object: link0, verb: queue-set, args: [a, limit_, 10]}]\n"
    )
    assert exp.events[0].args == ("a", "limit_", "10")
    assert [(x.name, x.peer) for x in exp.agents] == [("u", "n"), ("n", "u")]


def test_a_manual_route_beside_a_bad_netmask_is_an_error_not_a_crash():
    found = problems(
        """
routing: manual
nodes: [{name: a, routes: [{dst: 10.9.0.0/16, via: 10.1.1.3}]}, {name: b}]
links: [{name: l, members: [a, b], netmask: 255.0.255.0}]
"""
    )
    assert "netmask '255.0.255.0' is not a valid IPv4 netmask" in found[0]


def test_yaml_subnets_follow_file_order():
    exp = build(
        "nodes: [{name: a}, {name: b}]\nlans: [{members: [a, b]}]\nlinks: [{members: [a, b]}]\n"
    )
    assert (exp.lans[0].subnet, exp.links[0].subnet) == ("10.1.1.0/24", "10.1.2.0/24")


def test_automatic_subnets_go_past_10_1_255_into_10_2():
    links = "  - {members: [a, b]}\n" * 300
    exp = build("nodes: [{name: a}, {name: b}]\nlinks:\n" + links)
    subnets = [x.subnet for x in exp.links]
    assert subnets[254:257] == ["10.1.255.0/24", "10.2.0.0/24", "10.2.1.0/24"]
    assert len(set(subnets)) == 300
