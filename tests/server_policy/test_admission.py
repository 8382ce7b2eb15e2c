"""Admission control: an experiment's demand from its IR through the mapper's model, the
machine's capacity, and the one-sentence refusals."""

from __future__ import annotations

import pytest

from nbtest import EXAMPLES, build
from nestbed.errors import UserError
from nestbed.mapper.hostsfile import parse_hosts
from nestbed.mapper.problem import FRAME_BITS
from nestbed.server.admission import (
    GIB,
    MIB,
    AdmissionPolicy,
    Demand,
    HostFacts,
    admit,
    demand_of,
    machine_capacity,
)
from nestbed.spec import load

TWO = """
    nodes:
      - {name: a, cpu: 1.5, memory: 512MB}
      - {name: b}
    links:
      - {name: l0, members: [a, b], bandwidth: 12Mb, delay: 1ms}
"""
MACHINE = HostFacts(cores=8, memory_bytes=16 * GIB)


def test_the_dumbbell_demands_its_nodes_and_its_shaped_links_at_full_rate():
    d = demand_of(load(EXAMPLES / "dumbbell.yaml").experiment)
    assert (d.nodes, d.namespaces, d.unquoted_nodes, d.quota_cores) == (6, 7, 6, 0.0)
    shaped_bps = 4 * 100_000_000 + 10_000_000
    # both directions of every link on the one host's link emulator, as mapper.check counts
    assert d.linkd_pps == pytest.approx(2 * shaped_bps / FRAME_BITS)
    assert d.loopback_bps == shaped_bps
    assert (d.memory_limit_bytes, d.unlimited_memory_nodes) == (0, 6)


def test_quotas_and_limits_are_read_from_the_nodes():
    d = demand_of(build(TWO))
    assert (d.quota_cores, d.unquoted_nodes) == (1.5, 1)
    assert (d.memory_limit_bytes, d.unlimited_memory_nodes) == (512_000_000, 1)
    assert d.linkd_pps == pytest.approx(2 * 12_000_000 / FRAME_BITS) == 2000


def test_an_unshaped_link_costs_the_link_emulator_nothing_and_needs_no_fabric():
    d = demand_of(
        build("""
        nodes: [{name: a}, {name: b}]
        links: [{name: l0, members: [a, b]}]
    """)
    )
    assert (d.linkd_pps, d.namespaces) == (0.0, 2)
    assert d.loopback_bps == 100_000_000  # the mapper's estimate of an unlimited link


def test_an_unshaped_link_that_events_act_on_goes_through_the_link_emulator():
    d = demand_of(
        build("""
        nodes: [{name: a}, {name: b}]
        links: [{name: l0, members: [a, b]}]
        events: [{at: 1, object: l0, verb: down}]
    """)
    )
    assert (d.linkd_pps, d.namespaces) == (pytest.approx(2 * 100_000_000 / FRAME_BITS), 3)


def test_an_experiment_that_fits_is_admitted_and_names_what_was_not_checked():
    decision = admit("two", demand_of(build(TWO)), MACHINE)
    assert decision.fits and decision.fits_empty and not decision.reason
    assert decision.unchecked == ("packet rate", "loopback bandwidth")


def test_cores_taken_by_live_experiments_refuse_with_what_is_left():
    live = [Demand(nodes=4, quota_cores=6.0), Demand(nodes=16, unquoted_nodes=16)]
    want = Demand(nodes=12, quota_cores=1.0, unquoted_nodes=8)
    decision = admit("big", want, MACHINE, live)
    assert not decision.fits and decision.fits_empty and decision.lacking == "cores"
    assert decision.reason == (
        "experiment big needs 2 cores' worth of nodes (4 with CPU quotas of 1 cores in all "
        "and 8 without a quota at 8 per core) but 0 of the machine's 8 cores are left; "
        "wait for other experiments to swap out, or queue it as a batch experiment"
    )
    assert admit("big", want, MACHINE, live[1:]).fits


def test_more_than_the_whole_machine_is_refused_for_good():
    decision = admit("huge", Demand(nodes=3, quota_cores=12.0), MACHINE)
    assert (decision.fits, decision.fits_empty, decision.lacking) == (False, False, "cores")
    assert decision.reason == (
        "experiment huge needs 12 cores' worth of nodes (3 with CPU quotas of 12 cores in all) "
        "but the machine has only 8 cores; give its nodes smaller CPU quotas or use fewer nodes"
    )


def test_memory_counts_limits_whole_and_estimates_the_others_after_the_hosts_reserve():
    policy = AdmissionPolicy(node_memory_bytes=100 * MIB, host_memory_reserve_bytes=1 * GIB)
    machine = HostFacts(cores=64, memory_bytes=2 * GIB)
    fits = Demand(nodes=10, unlimited_memory_nodes=10)  # 1000 MiB of the 1 GiB left
    assert admit("m", fits, machine, policy=policy).fits
    decision = admit("m", fits, machine, [Demand(memory_limit_bytes=100 * MIB)], policy)
    assert decision.lacking == "memory"
    assert decision.reason.startswith(
        "experiment m needs 1000 MiB of memory (10 without a limit at 100 MiB each) "
        "but 924 MiB of the machine's 1.0 GiB are left"
    )


def test_the_link_emulators_packet_rate_is_checked_when_the_machine_says_it():
    machine = HostFacts(cores=8, memory_bytes=16 * GIB, linkd_pps=3000)
    two = demand_of(build(TWO))  # 2000 packets/s
    assert admit("two", two, machine).fits
    decision = admit("two", two, machine, [two])
    assert decision.lacking == "packet rate" and decision.unchecked == ("loopback bandwidth",)
    assert decision.reason.startswith(
        "experiment two needs its link emulator to carry 2 000 packets/s (at its shaped links' "
        "full rate of full-size frames) but 1 000 of the machine's 3 000 packets/s are left"
    )


def test_node_slots_are_checked_first():
    decision = admit("n", Demand(nodes=5), HostFacts(cores=8, memory_bytes=GIB * 8, max_nodes=4))
    assert decision.lacking == "nodes" and not decision.fits_empty
    assert decision.reason.startswith(
        "experiment n needs 5 nodes but the machine has only 4 node slots"
    )


def test_quota_overcommit_and_nodes_per_core_are_the_policys():
    want = Demand(nodes=20, quota_cores=10.0, unquoted_nodes=10)
    assert not admit("x", want, MACHINE).fits  # 10 + 10/8 > 8
    generous = AdmissionPolicy(quota_overcommit=2.0, nodes_per_core=4)
    assert admit("x", want, MACHINE, policy=generous).fits  # 5 + 2.5 <= 8


def test_a_policy_rejects_nonsense_in_one_sentence():
    with pytest.raises(UserError, match="nodes_per_core must be above 0, not 0"):
        AdmissionPolicy(nodes_per_core=0)


def test_capacity_comes_from_measured_facts_and_the_machines_hosts_yaml():
    measured = {"cpus": 2, "memory_bytes": 8 * GIB}
    assert machine_capacity(measured) == HostFacts(cores=2, memory_bytes=8 * GIB)
    testbed = parse_hosts("hosts: [{name: me, cores: 4, linkd_pps: 200000}]")
    facts = machine_capacity(measured, testbed.hosts[0])
    assert facts == HostFacts(
        cores=4, memory_bytes=8 * GIB, linkd_pps=200_000, loopback_bps=None, max_nodes=32
    )
    described = parse_hosts("hosts: [{name: me, memory: 4GB}]").hosts[0]
    assert machine_capacity(measured, described).memory_bytes == 4_000_000_000


def test_a_demand_survives_the_store():
    d = demand_of(load(EXAMPLES / "lan.yaml").experiment)
    assert Demand.from_dict(d.to_dict()) == d
    assert d + Demand() == d and (d + d).nodes == 2 * d.nodes
