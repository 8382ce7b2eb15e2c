"""A cut link's MTU follows the underlay's, found on the hosts at swap-in: on a 1500-byte
underlay the nodes' interfaces of a cut link carry 1450 bytes (a DF packet larger is refused
by the node's own stack, never lost in the tunnel) and swap-in says so in one warning line;
a path between the hosts that carries less than their interfaces fails the swap-in in one
sentence."""

from __future__ import annotations

import subprocess

import pytest
from simulated import DUMBBELL, namespaces, started

from nbtest import experiment
from nestbed.backend.cluster.backend import ClusterBackend
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem

pytestmark = pytest.mark.root


def _ping(backend, p, node, *argv):
    return backend.exec_in(p, node, ["ping", "-n", *argv], capture_output=True, text=True)


def test_on_a_1500_byte_underlay_swapin_warns_and_a_nodes_larger_df_packet_is_refused_there(
    capsys,
):
    with (
        started(2, slots=2, mtu=1500) as (machines, agents),
        ClusterBackend(agents.address, state_root=machines.run_dir("controller")) as backend,
    ):
        p = plan(experiment(DUMBBELL, "i21narrow"))
        backend.swap_in(p)
        try:
            said = capsys.readouterr().err
            _, underlay = backend.placement(p)
            assert underlay.mtu == 1500 and underlay.link_mtu == 1450
            assert said.count("warning:") == 1, said
            assert "(bottleneck) carry packets of at most 1450 bytes" in said, said
            shown = _ping(backend, p, "r1", "-c", "2", "-i", "0.2", "-M", "do", "-s", "1422", "r2")
            assert shown.returncode == 0, shown.stdout + shown.stderr
            refused = _ping(backend, p, "r1", "-c", "1", "-M", "do", "-s", "1472", "r2")
            assert refused.returncode != 0
            assert "message too long, mtu=1450" in refused.stdout + refused.stderr
        finally:
            backend.swap_out(p)
        assert not [n for n in namespaces() if n.startswith(f"nb-{p.tag}")]


def test_a_path_narrower_than_the_hosts_interfaces_fails_the_swapin_in_one_sentence(
    simulated_cluster,
):
    machines, agents = simulated_cluster
    p = plan(experiment(DUMBBELL, "i21switch"))
    # Between the hosts, a path that carries less than their interfaces' 9000 bytes (as a
    # switch left at 1500 would): here a route of 1500 bytes from each host to the others,
    # which the interface's MTU does not show (the scheduler's traffic is not touched).
    routes = [(h, ["route", f"{machines.addresses[o]}/32", "dev", "up0"])
              for h in machines.hosts for o in machines.hosts if o != h]  # fmt: skip
    try:
        for h, route in routes:
            subprocess.run(machines.argv(h, "ip", *route[:1], "add", *route[1:], "mtu",
                                         "lock", "1500"), check=True)  # fmt: skip
        backend = ClusterBackend(agents.address, state_root=machines.run_dir("controller"))
        with backend, pytest.raises(EnvironmentProblem) as failed:
            backend.swap_in(p)
    finally:
        for h, route in routes:
            subprocess.run(machines.argv(h, "ip", *route[:1], "del", *route[1:]))
    said = str(failed.value)
    assert "could not measure the underlay: a 9000-byte packet does not reach" in said, said
    assert "give every switch between the hosts that MTU" in said
    assert not [n for n in namespaces() if n.startswith(f"nb-{p.tag}")]
