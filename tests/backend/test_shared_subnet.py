"""Two links in one subnet (Emulab allows it, and its own tests do it): every address is
reached through the right link, from the node that has both and from nodes beyond."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from nestbed.backend import linux
from nestbed.backend.plan import plan
from nestbed.spec import load

SHARED = """set ns [new Simulator]
source tb_compat.tcl
set n0 [$ns node]
set n1 [$ns node]
set n2 [$ns node]
set n3 [$ns node]
set l1 [$ns duplex-link $n0 $n1 10Mb 1ms DropTail]
set l2 [$ns duplex-link $n0 $n2 10Mb 1ms DropTail]
set l3 [$ns duplex-link $n2 $n3 10Mb 1ms DropTail]
tb-set-ip-link $n0 $l1 10.1.1.1
tb-set-ip-link $n1 $l1 10.1.1.2
tb-set-ip-link $n0 $l2 10.1.1.3
tb-set-ip-link $n2 $l2 10.1.1.4
$ns rtproto Static
$ns run
"""


def _experiment(tmp_path: Path, name: str):  # type: ignore[no-untyped-def]
    path = tmp_path / f"{name}.ns"
    path.write_text(SHARED)
    return load(path).experiment


def test_the_plan_routes_a_shared_subnet_address_by_address(tmp_path):
    exp = _experiment(tmp_path, "shared-plan")
    p = plan(exp)
    routes = {n.name: {(r.destination, r.via, r.dev) for r in n.routes} for n in p.nodes}
    # n0 has both links: each neighbour on its own interface.
    n0 = {r for r in routes["n0"] if r[2]}
    assert {(d, v) for d, v, _ in n0} == {("10.1.1.2/32", ""), ("10.1.1.4/32", "")}
    assert len({dev for _, _, dev in n0}) == 2
    # n1 is on l1 only: l2's addresses go through n0, not onto its own link.
    assert ("10.1.1.4/32", "10.1.1.1", "") in routes["n1"]
    assert ("10.1.1.3/32", "10.1.1.1", "") in routes["n1"]
    # n3, two hops away, reaches every shared address through n2.
    n2 = next(port.ip for link in exp.all_links if link.name == "l3" for port in link.ports
              if port.node == "n2")  # fmt: skip
    assert {("10.1.1.1/32", n2, ""), ("10.1.1.2/32", n2, "")} <= routes["n3"]


@pytest.mark.root
def test_every_address_answers_from_every_node(swapped, tmp_path):
    exp = _experiment(tmp_path, "shared")
    p = swapped(exp)
    addresses = [port.ip for link in exp.all_links for port in link.ports]
    failed = []
    for node, address in itertools.product([n.name for n in exp.nodes], addresses):
        done = linux.exec_in(p, node, ["ping", "-c", "1", "-W", "2", address],
                             capture_output=True)  # fmt: skip
        if done.returncode != 0:
            failed.append(f"{node} → {address}")
    assert not failed
