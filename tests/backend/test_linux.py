"""The Linux back end on real namespaces: wiring, addresses, routes, names, clean swap-out."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from dataclasses import replace

import pytest
from pyroute2 import NetNS, netns

from nbtest import experiment
from nestbed.backend import linux, netlink
from nestbed.backend.plan import RouteEntry, plan
from nestbed.errors import EnvironmentProblem

pytestmark = pytest.mark.root


ROUTED = """
routing: static
nodes: [{name: a}, {name: r}, {name: b}, {name: c}]
links: [{name: up, members: [a, r]}]
lans: [{name: lan0, members: [r, b, c]}]
"""


def ping(p, node, dst):
    return linux.exec_in(
        p, node, ["ping", "-c", "1", "-W", "2", dst], capture_output=True, text=True
    )


def test_static_routes_reach_every_node_through_a_link_and_a_bridge(swapped):
    p = swapped(experiment(ROUTED, "routed"))
    for src in ("a", "b", "c"):
        for dst in ("a", "b", "c", "r-up", "r-lan0"):
            if dst != src:
                result = ping(p, src, dst)
                assert result.returncode == 0, f"{src} -> {dst}: {result.stdout}{result.stderr}"


def test_nodes_get_addresses_names_and_forwarding(swapped):
    exp = experiment(ROUTED, "addr")
    p = swapped(exp)
    r = next(n for n in p.nodes if n.name == "r")
    with NetNS(r.netns) as ipr:
        addrs = sorted(a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=2))
    assert addrs == sorted(["127.0.0.1", exp.links[0].port("r").ip, exp.lans[0].port("r").ip])
    forwarding = linux.exec_in(
        p, "r", ["cat", "/proc/sys/net/ipv4/ip_forward"], capture_output=True, text=True
    )
    assert forwarding.stdout.strip() == "1"
    hosts = linux.exec_in(p, "a", ["getent", "hosts", "c-lan0"], capture_output=True, text=True)
    assert hosts.stdout.split()[0] == exp.lans[0].port("c").ip


def test_without_routing_only_neighbours_are_reached(swapped):
    p = swapped(experiment(ROUTED.replace("routing: static", "routing: none"), "norout"))
    assert ping(p, "a", "r-up").returncode == 0
    assert ping(p, "a", "b").returncode != 0


def test_two_experiments_do_not_see_each_other(swapped):
    one = swapped(experiment(ROUTED, "iso1"))
    two = swapped(experiment(ROUTED, "iso2"))
    assert set(one.namespaces).isdisjoint(two.namespaces)
    # Same addresses in both experiments, yet each node reaches only its own experiment.
    assert ping(one, "a", "b").returncode == 0 and ping(two, "a", "b").returncode == 0
    with NetNS(one.nodes[0].netns) as ipr:
        assert len(ipr.get_links()) == 2  # lo and its one interface, nothing of the other


def test_a_failed_swap_in_removes_what_it_made():
    p = plan(experiment(ROUTED, "fail"))
    # A route through an address no interface can reach makes the kernel refuse it midway.
    bad_node = replace(p.nodes[0], routes=(RouteEntry("10.99.0.0/16", "192.0.2.1"),))
    broken = replace(p, nodes=(bad_node, *p.nodes[1:]))
    with pytest.raises(
        EnvironmentProblem,
        match=re.escape("while adding route to 10.99.0.0/16 via 192.0.2.1 on node a: Network is"),
    ) as info:
        linux.swap_in(broken)
    assert isinstance(info.value.__cause__, netlink.Refused)
    assert not set(p.namespaces) & set(linux.leftovers())
    assert not (linux.NETNS_ETC / p.nodes[0].netns).exists()


def test_swap_in_refuses_a_namespace_that_exists_and_leaves_it_alone():
    p = plan(experiment(ROUTED, "taken"))
    subprocess.run(["ip", "netns", "add", p.namespaces[1]], check=True)
    try:
        with pytest.raises(EnvironmentProblem, match="already exists"):
            linux.swap_in(p)
        assert p.namespaces[1] in netns.listnetns()
        assert p.namespaces[0] not in netns.listnetns()
        # not nestbed's (no mark): neither a leftover nor removed by swap-out or cleanup
        assert p.namespaces[1] not in linux.leftovers()
        linux.swap_out(p)
        assert p.namespaces[1] in netns.listnetns()
    finally:
        subprocess.run(["ip", "netns", "delete", p.namespaces[1]], check=True)


def test_interfaces_into_linkd_have_their_offloads_off_and_carry_the_mark(swapped):
    shaped = ROUTED.replace("[a, r]}", "[a, r], bandwidth: 10Mb}")
    p = swapped(experiment(shaped, "offl"))
    ends = [end for v in p.veths for end in (v.a, v.b) if end.no_offloads]
    assert ends
    for end in ends:
        features = subprocess.run(
            ["ip", "netns", "exec", end.netns, "ethtool", "-k", end.ifname],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        for name in ("tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-checksum-ip-generic",
                     "generic-segmentation-offload", "generic-receive-offload"):  # fmt: skip
            assert re.search(rf"^\s*{name}: off$", features, re.M), (end.ifname, features)
    with NetNS(p.fabric) as ipr:
        marked = [x.get_attr("IFLA_PROP_LIST") for x in ipr.get_links()]
    assert all(m and m.get_attr("IFLA_ALT_IFNAME").startswith("nestbed.") for m in marked)


def _send_20_mb(p) -> None:
    """20 MB over TCP from a to b (iperf3)."""
    server = linux.start_in(p, "b", ["iperf3", "-s", "-1", "-p", "5299"],
                            stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(100):  # until it listens (a connection refused would end the test)
            listening = ["ss", "-Hltn", "sport", "=", ":5299"]
            if linux.exec_in(p, "b", listening, capture_output=True, text=True).stdout:
                break
            time.sleep(0.05)
        sent = linux.exec_in(p, "a", ["iperf3", "-c", "b", "-p", "5299", "-n", "20M"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        server.kill()
        server.wait()
    assert sent.returncode == 0, sent.stdout + sent.stderr


def test_a_fast_shaped_link_keeps_its_offloads_and_cuts_super_frames_once_lossy(swapped):
    # 10 Gb/s each way: the interfaces keep their offloads (plan.keeps_offloads), and linkd
    # carries TCP's super-frames whole. Loss set during the run (as by an event): linkd cuts
    # them into wire frames before the lossy pipe, and TCP still delivers, its checksums
    # checked by the receiver.
    fast = """
nodes: [{name: a}, {name: b}]
links: [{name: l0, members: [a, b], bandwidth: 10Gb}]
"""
    p = swapped(experiment(fast, "offon"))
    ends = [end for v in p.veths for end in (v.a, v.b)]
    assert len(ends) == 4 and not any(end.no_offloads for end in ends)
    for end in ends:
        features = subprocess.run(
            ["ip", "netns", "exec", end.netns, "ethtool", "-k", end.ifname],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert re.search(r"^\s*tcp-segmentation-offload: on$", features, re.M), features
    with linux.linkd(p) as client:
        _send_20_mb(p)
        egress = client.request("counters", link="l0")["links"]["l0"]["ports"]["a"]["egress"]
        whole = egress["counters"]
        assert whole["bytes_in"] > 10e6 and whole["bytes_in"] / whole["packets_in"] > 3000, whole
        lossy = {"bandwidth": {"rate_bps": 10**10}, "loss": {"model": "bernoulli", "p": 0.01}}
        client.request("set", link="l0", port="a", direction="egress", params=lossy)
        _send_20_mb(p)
        a = client.request("counters", link="l0")["links"]["l0"]["ports"]["a"]
    cut = {key: a["egress"]["counters"][key] - whole[key] for key in ("packets_in", "bytes_in")}
    lost = a["egress"]["counters"]["drops"]["loss"]
    # Cut into frames of at most 1514 bytes before the lossy pipe, each lost on its own.
    assert a["segmented"] > 0, a
    assert cut["packets_in"] > 5000 and cut["bytes_in"] <= cut["packets_in"] * 1514, cut
    assert 0 < lost < cut["packets_in"] * 0.03, (lost, cut)


def test_no_interface_of_nodes_or_fabric_speaks_ipv6(swapped):
    # A fabric end with IPv6 on sends router solicitations and MLD reports into its node at
    # times of its own choosing: noise in every capture of an IPv4 experiment.
    p = swapped(experiment(ROUTED.replace("[a, r]}", "[a, r], bandwidth: 10Mb}"), "quiet"))
    assert p.fabric in p.namespaces
    for namespace in p.namespaces:
        with NetNS(namespace) as ipr:
            names = [x.get_attr("IFLA_IFNAME") for x in ipr.get_links()]
            v6 = [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6)]
        assert v6 == [], (namespace, v6)
        for name in names:
            off = subprocess.run(
                ["ip", "netns", "exec", namespace, "sysctl", "-n",
                 f"net.ipv6.conf.{name}.disable_ipv6"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            assert off.strip() == "1", (namespace, name)


def test_swapping_out_what_was_never_swapped_in_creates_nothing():
    """Checking whether a missing namespace carries the mark must not create it (pyroute2's
    pushns of a name creates a missing namespace)."""
    p = plan(experiment(ROUTED, "ghost"))
    ours = {n.netns for n in p.nodes} | set(p.namespaces)
    assert not ours & set(netns.listnetns())
    linux.swap_out(p)
    # Its own names only: other work on the machine may make namespaces meanwhile.
    assert not ours & set(netns.listnetns())
    with pytest.raises(FileNotFoundError), linux.inside(p.namespaces[0]):
        pass


def test_ports_beyond_the_ring_budget_keep_to_the_copy_path_and_carry_frames(swapped, monkeypatch):
    # A ring pins about 4.5 MB a port; linkd's budget of 10 MB gives some ports rings and
    # the rest the copy path, which is no error: every frame still crosses the chain.
    monkeypatch.setenv("NESTBED_LINKD_RING_MB", "10")
    monkeypatch.delenv("NESTBED_LINKD_IO", raising=False)
    chain = """
routing: static
nodes: [{name: a}, {name: b}, {name: c}, {name: d}]
links:
  - {name: l0, members: [a, b], bandwidth: 100Mb, delay: 1ms}
  - {name: l1, members: [b, c], bandwidth: 100Mb, delay: 1ms}
  - {name: l2, members: [c, d], bandwidth: 100Mb, delay: 1ms}
"""
    p = swapped(experiment(chain, "ringb"))
    done = linux.exec_in(p, "a", ["ping", "-c", "5", "-i", "0.05", "-W", "2", "d"],
                         capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    with linux.linkd(p) as client:
        counters = client.request("counters")
    ports = {(link, port): data for link, found in counters["links"].items()
             for port, data in found["ports"].items()}  # fmt: skip
    paths = sorted(data["io"] for data in ports.values())
    assert len(paths) == 6 and "rings" in paths and "copy" in paths, paths
    # Each of a's five requests and d's five replies crossed every port, whatever its path.
    assert all(data["received"] >= 5 and data["sent"] >= 5 for data in ports.values()), ports
