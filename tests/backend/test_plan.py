"""The swap-in plan, computed without root: names, wiring, routes, hosts, pipe parameters."""

from __future__ import annotations

import ipaddress

from nbtest import EXAMPLES, build
from nestbed.backend.plan import IFNAME_MAX, check_names, experiment_tag, pipe_params, plan
from nestbed.model import GilbertElliott, Queue, Shaping
from nestbed.spec import load


def test_names_are_short_deterministic_and_tagged():
    p = plan(load(EXAMPLES / "tree.ns").experiment)
    assert p.tag == experiment_tag("tree") and len(p.tag) == 8
    assert check_names(p) == []
    assert all(len(i.ifname) <= IFNAME_MAX for v in p.veths for i in (v.a, v.b))
    assert all(ns.startswith(f"nb-{p.tag}") for ns in p.namespaces)
    assert plan(load(EXAMPLES / "tree.ns").experiment) == p
    assert experiment_tag("tree") != experiment_tag("tree2")


def test_unshaped_link_is_a_direct_cable_and_shaped_goes_through_linkd():
    exp = build(
        """
        nodes: [{name: a}, {name: b}, {name: c}]
        links:
          - {name: plain, members: [a, b]}
          - {name: slow, members: [b, c], delay: 5ms}
        """
    )
    p = plan(exp)
    plain = [v for v in p.veths if v.link == "plain"]
    assert len(plain) == 1 and {plain[0].a.netns, plain[0].b.netns} == {
        "nb-" + p.tag + "-a",
        "nb-" + p.tag + "-b",
    }
    slow = [v for v in p.veths if v.link == "slow"]
    assert len(slow) == 2 and all(v.b.netns == p.fabric and v.a.no_offloads for v in slow)
    assert [e.link for e in p.emulated] == ["slow"]
    assert p.emulated[0].ports[0].egress == {"delay": {"delay_ns": 5_000_000}}


def test_shaped_links_faster_than_a_gigabit_every_way_keep_their_offloads():
    exp = build(
        """
        nodes: [{name: a}, {name: b}, {name: c}, {name: d}, {name: e, simulated: true}]
        links:
          - {name: fast, members: [a, b], bandwidth: 10Gb, delay: 1ms}
          - {name: deep, members: [a, c], bandwidth: 2.5Gb, delay: 2ms, queue: {limit: 1000}}
          - {name: lossy, members: [a, d], bandwidth: 10Gb, loss: 0.001}
          - {name: jittery, members: [b, d], bandwidth: 10Gb, delay: 1ms, jitter: 100us}
          - {name: gigabit, members: [b, c], bandwidth: 1Gb}
          - {name: delayed, members: [c, d], delay: 5ms}
          - {name: tosim, members: [d, e], bandwidth: 10Gb, simulated: true}
        lans:
          - {name: flan, members: [a, b, d], bandwidth: 5Gb}
        """
    )
    p = plan(exp)

    def offloads_off(link):
        ends = {end.no_offloads for v in p.veths if v.link == link for end in (v.a, v.b)}
        assert len(ends) == 1, (link, ends)  # both ends of every veth of a link alike
        return ends.pop()

    assert not any(offloads_off(link) for link in ("fast", "deep", "flan"))
    assert all(offloads_off(link) for link in ("gigabit", "delayed", "lossy", "jittery"))
    # nestbed-sim reads wire frames: a link to a simulated node keeps them off.
    assert offloads_off("tosim")
    assert len(p.emulated) == 8


def test_a_link_slower_one_way_keeps_offloads_off():
    exp = build(
        "nodes: [{name: a}, {name: b}]\nlinks: [{name: l, members: [a, b], bandwidth: 10Gb}]"
    )
    assert not plan(exp).veths[0].a.no_offloads
    link = exp.links[0]
    slow_back = link.ports[1].model_copy(update={"egress": Shaping(bandwidth_bps=100_000_000)})
    asymmetric = link.model_copy(update={"ports": (link.ports[0], slow_back)})
    p = plan(exp.model_copy(update={"links": (asymmetric,)}))
    assert all(end.no_offloads for v in p.veths for end in (v.a, v.b))


def test_unshaped_lan_is_a_bridge():
    p = plan(
        build("nodes: [{name: a}, {name: b}, {name: c}]\nlans: [{name: l, members: [a, b, c]}]")
    )
    assert [(b.ifname, b.ports) for b in p.bridges] == [("br0", ("l0p0", "l0p1", "l0p2"))]
    assert p.emulated == ()


def test_static_routes_use_a_default_via_the_commonest_next_hop():
    p = plan(load(EXAMPLES / "dumbbell.ns").experiment)
    routes = {n.name: [(r.destination, r.via) for r in n.routes] for n in p.nodes}
    assert routes["h1"] == [("default", "10.1.1.3")]
    assert routes["r1"] == [("default", "10.1.3.3")]
    assert routes["r2"] == [("default", "10.1.3.2")]


def test_static_routes_follow_costs():
    exp = build(
        """
        routing: static
        nodes: [{name: a}, {name: b}, {name: c}, {name: d}]
        links:
          - {name: ab, members: [{node: a, cost: 5}, b]}
          - {name: ac, members: [a, c]}
          - {name: bd, members: [b, d]}
          - {name: cd, members: [c, d]}
        """
    )
    a = next(n for n in plan(exp).nodes if n.name == "a")
    assert [(r.destination, r.via) for r in a.routes] == [("default", exp.links[1].port("c").ip)]


def test_manual_and_none_routing():
    manual = build(
        """
        routing: manual
        nodes: [{name: a, routes: [{dst: c, via: b}]}, {name: b}, {name: c}]
        links: [{name: ab, members: [a, b]}, {name: bc, members: [b, c]}]
        """
    )
    a = next(n for n in plan(manual).nodes if n.name == "a")
    assert [(r.destination, r.via) for r in a.routes] == [("10.1.2.3/32", "10.1.1.3")]
    none = build(
        "nodes: [{name: a}, {name: b}, {name: c}]\nlinks: [{members: [a, b]}, {members: [b, c]}]"
    )
    assert all(n.routes == () for n in plan(none).nodes)


def test_hosts_and_forwarding():
    p = plan(load(EXAMPLES / "dumbbell.ns").experiment)
    r1 = next(n for n in p.nodes if n.name == "r1")
    assert "10.1.3.2\tr1-bottleneck\n" in r1.hosts and "10.1.1.2\th1-access1 h1\n" in r1.hosts
    assert r1.sysctls["net.ipv4.ip_forward"] == "1"
    h1 = next(n for n in p.nodes if n.name == "h1")
    assert "net.ipv4.ip_forward" not in h1.sysctls and h1.interfaces == ("eth0",)


def test_pipe_params_for_every_shaping_field():
    s = Shaping(
        bandwidth_bps=1_544_000,
        delay_s=0.02,
        jitter_s=0.001,
        jitter_distribution="normal",
        gilbert_elliott=GilbertElliott(p=0.01, r=0.5),
        drop_ordinals=(3, 7),
        duplicate=0.01,
        corrupt=0.001,
        queue=Queue(kind="gred", limit=30000, limit_unit="bytes", thresh=3, maxthresh=9),
    )
    assert pipe_params(s) == {
        "loss": {
            "model": "gilbert_elliott",
            "p": 0.01,
            "r": 0.5,
            "loss_in_bad": 1.0,
            "loss_in_good": 0.0,
        },
        "drop_ordinals": [3, 7],
        "queue": {
            "limit": {"bytes": 30000},
            "red": {
                "thresh": 3,
                "maxthresh": 9,
                "q_weight": 0.002,
                "linterm": 10.0,
                "gentle": True,
                "queue_in_bytes": True,
                "mean_pktsize": 500,
            },
        },
        "bandwidth": {"rate_bps": 1_544_000},
        "delay": {
            "delay_ns": 20_000_000,
            "jitter_ns": 1_000_000,
            "distribution": "normal",
            "duplicate": 0.01,
            "corrupt": 0.001,
        },
    }
    assert pipe_params(Shaping(loss=0.1)) == {"loss": {"model": "bernoulli", "p": 0.1}}
    assert pipe_params(Shaping()) == {}


def test_a_chain_needs_few_routes_per_node_and_each_subnet_keeps_its_next_hop():
    n = 300  # subnets cross from 10.1.255.0 into 10.2.0.0
    names = ", ".join(f"{{name: n{i}}}" for i in range(n))
    links = "".join(f"  - {{members: [n{i}, n{i + 1}]}}\n" for i in range(n - 1))
    exp = build(f"routing: static\nnodes: [{names}]\nlinks:\n{links}")
    routes = {node.name: node.routes for node in plan(exp).nodes}
    assert max(len(r) for r in routes.values()) < 20  # not one route per subnet
    for i in (1, 150, 254, 255, 298):
        table = [(ipaddress.ip_network("0.0.0.0/0" if r.destination == "default"
                                       else r.destination), r.via) for r in routes[f"n{i}"]]  # fmt: skip
        left = exp.links[i - 1].port(f"n{i - 1}").ip
        right = exp.links[i].port(f"n{i + 1}").ip if i < n - 1 else None
        for j, link in enumerate(exp.links):
            if j in (i - 1, i):
                continue  # connected
            host = ipaddress.ip_network(link.subnet)[1]
            via = max((t for t in table if host in t[0]), key=lambda t: t[0].prefixlen)[1]
            assert via == (left if j < i - 1 else right), (i, link.subnet)


def test_a_link_change_sets_exactly_the_pipes_that_changed():
    from nestbed.backend.linkd import set_changed_pipes

    class Linkd:
        def __init__(self):
            self.sets = []

        def request(self, op, **fields):
            self.sets.append((op, fields["port"], fields["direction"], fields["params"]))
            return {}

    slow, fast = pipe_params(Shaping(bandwidth_bps=1e6)), pipe_params(Shaping(bandwidth_bps=1e7))
    before = [("a", slow, slow), ("b", slow, slow)]
    after = [("a", slow, fast), ("b", fast, slow)]
    linkd = Linkd()
    assert set_changed_pipes(linkd, "l", before, after) == 2
    assert linkd.sets == [("set", "a", "ingress", fast), ("set", "b", "egress", fast)]
    assert set_changed_pipes(linkd, "l", after, after) == 0
