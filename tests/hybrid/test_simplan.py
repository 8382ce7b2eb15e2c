"""The simulated part of a plan, without root: what nestbed-sim is told, what gets a namespace,
and the one-sentence refusals of what the simulator cannot run yet."""

from __future__ import annotations

import pytest

from nbtest import EXAMPLES, build
from nestbed.backend import sim
from nestbed.backend.plan import plan
from nestbed.errors import EnvironmentProblem, UserError
from nestbed.model.ir import Program
from nestbed.spec import load

HYBRID = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: h3}, {name: r1, simulated: true}, {name: r2, simulated: true}]
links:
  - {name: core, members: [r1, r2], bandwidth: 2Mb, delay: 20ms, loss: 0.01, simulated: true}
  - {name: a1, members: [h1, r1], simulated: true}
  - {name: a2, members: [h2, r2], bandwidth: 100Mb, simulated: true}
  - {name: behind, members: [h2, h3]}
"""


def test_simulated_nodes_get_no_namespace_and_attachments_end_in_the_fabric():
    p = plan(build(HYBRID))
    assert [n.name for n in p.nodes] == ["h1", "h2", "h3"]
    assert p.namespaces[0] == p.fabric and len(p.namespaces) == 4
    ends = {(v.link, v.a.netns, v.a.ifname, v.b.netns, v.b.ifname) for v in p.veths}
    h1 = p.node("h1").netns
    # unshaped a1: one veth, the node's end to the simulator's end in the fabric
    assert (p.simulation.attachments[0].link, p.simulation.attachments[0].ifname) == ("a1", "s1")
    assert ("a1", h1, "eth0", p.fabric, "s1") in ends
    # shaped a2: the node's veth to linkd, and linkd's other port to the simulator's end
    assert ("a2", p.fabric, "s2", p.fabric, "l2p1") in ends
    assert [e.link for e in p.emulated] == ["a2"]
    assert all(end.no_offloads for v in p.veths if v.link in ("a1", "a2") for end in (v.a, v.b))


def test_nestbed_sim_is_told_nodes_links_attachments_then_routes():
    text = plan(build(HYBRID)).simulation.description({"a1": 7, "a2": 8})
    lines = text.splitlines()
    assert lines[:3] == ["hard_limit_s 0.005", "node r1", "node r2"]
    # 2 Mb/s, 20 ms, linkd's default queue (its bandwidth-delay product, at least 50
    # packets) each way, 1 % loss each way
    assert lines[3] == (
        "p2p core r1 10.1.1.2/24 r2 10.1.1.3/24 2000000 2000000 0.02 50 50 0.01 0.01"
    )
    assert lines[4:6] == ["attach a1 r1 10.1.2.3/24 7", "attach a2 r2 10.1.3.3/24 8"]
    routes = [line for line in lines if line.startswith("route ")]
    # r1 reaches h3's link behind emulated h2 through the simulated core
    assert "route r1 0.0.0.0/0 10.1.1.3" in routes
    assert any(r.startswith("route r2 ") and r.endswith(" 10.1.1.2") for r in routes)
    assert "route r2 10.1.4.0/24 10.1.3.2" in routes
    assert lines[-1] == "end" and lines.index(routes[0]) > 5


def test_emulated_nodes_route_into_the_simulated_part_through_their_attachment():
    exp = build(HYBRID)
    p = plan(exp)
    r1 = exp.links[1].port("r1").ip
    assert [(r.destination, r.via) for r in p.node("h1").routes] == [("default", r1)]
    h2 = exp.links[3].port("h2").ip
    assert [(r.destination, r.via) for r in p.node("h3").routes] == [("default", h2)]


def test_the_example_plans_two_hosts_and_a_simulated_core():
    p = plan(load(EXAMPLES / "hybrid.ns").experiment)
    assert [n.name for n in p.nodes] == ["h1", "h2"]
    assert p.simulation.nodes == ("r1", "r2")
    assert p.simulation.links == (
        "p2p core r1 10.1.1.2/24 r2 10.1.1.3/24 2000000 2000000 0.02 20 20 0.0 0.0",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "  - {name: mixed, kind: lan, members: [h1, r1, r2]}\n",
            "LAN mixed mixes emulated and simulated nodes; join an emulated node to a simulated one with a duplex-link",
        ),
    ],
)
def test_what_the_simulator_cannot_run_is_one_sentence(change, message):
    text = HYBRID + change
    if change.startswith("  - {name: mixed"):
        text = HYBRID.replace(
            "links:\n", "lans:\n" + change.replace(", kind: lan", "") + "links:\n"
        )
    with pytest.raises(UserError) as caught:
        plan(build(text))
    assert str(caught.value) == message


def test_different_delays_each_way_are_refused():
    text = HYBRID.replace(
        "bandwidth: 2Mb, delay: 20ms, loss: 0.01, simulated: true}",
        "bandwidth: 2Mb, delay: 20ms, simulated: true,\n"
        "     members: [{node: r1, egress: {delay: 5ms}}, r2]}",
    )
    text = text.replace("members: [r1, r2], ", "")
    with pytest.raises(UserError, match="simulated link core has delay 5 ms one way and 20 ms"):
        plan(build(text))


def test_without_nestbed_sim_swap_in_names_the_extra(monkeypatch):
    def missing(name: str) -> str:
        raise EnvironmentProblem(f"{name} is not built")

    monkeypatch.setattr(sim, "built_binary", missing)
    with pytest.raises(EnvironmentProblem) as caught:
        sim.binary(plan(build(HYBRID)))
    assert str(caught.value) == (
        "experiment t has simulated nodes (make-simulated), which run in nestbed-sim: "
        "install the hybrid extra and build it with `make setup`"
    )


def test_the_lag_lines_are_read_back():
    log = (
        "ready\nlag 1 0.000500 0.001000 0\nlag 2 0.007000 0.007000 3\nworst_lag_s 0.007000 late 4\n"
    )
    lag = sim.lag(log)
    assert lag.per_second_s == ((1, 0.0005), (2, 0.007))
    assert (lag.worst_s, lag.late) == (0.007, 4)


def test_run_options_keep_to_emulated_nodes():
    from nestbed.model.options import RunOptions

    exp = build(HYBRID)
    assert RunOptions(cpumon=("all",)).for_experiment(exp).cpumon == ("h1", "h2", "h3")
    with pytest.raises(
        UserError, match="experiment t has no node 'r1' for --cpumon; its nodes are h1, h2, h3"
    ):
        RunOptions(cpumon=("r1",)).for_experiment(exp)


def test_linktest_follows_routes_through_the_simulated_routers():
    from nestbed.linktest import expect

    exp = build(HYBRID)
    p = plan(exp)
    tables = {n.name: [(r.destination, r.via) for r in n.routes] for n in p.nodes}
    tables |= p.simulation.tables()
    forwarding = {"h2", "r1", "r2"}
    route = next(
        r for r in expect.routes(exp, tables, forwarding) if (r.src, r.dst) == ("h1", "h3")
    )
    assert route.reaches
    assert [(h.link, h.src, h.dst) for h in route.hops] == [
        ("a1", "h1", "r1"),
        ("core", "r1", "r2"),
        ("a2", "r2", "h2"),
        ("behind", "h2", "h3"),
    ]


def test_simulated_traffic_comes_last():
    from dataclasses import replace

    from nestbed.backend import simplan

    simulation = plan(build(HYBRID)).simulation
    line = simplan.cbr("x", "r1", "10.1.1.3", port=9, packet_bytes=1000, rate_bps=2_000_000)
    assert line == "cbr x r1 10.1.1.3 9 1000 2000000 0.0 0.0"
    text = replace(simulation, traffic=(line,)).description({"a1": 3, "a2": 4})
    assert text.endswith(f"{line}\nend\n")


def test_a_simulated_node_runs_its_agents():
    with_agents = HYBRID + (
        "agents:\n  - {name: u, type: udp, node: r1}\n  - {name: n, type: null, node: h1}\n"
    )
    assert plan(build(with_agents)).simulation.nodes == ("r1", "r2")


_NO_OS = "which has no operating system to run it; put it on an emulated node"
_EMULATED_ONLY = (
    "which only an emulated node (a namespace and its cgroup) has; remove it or move the node "
    "out of make-simulated"
)


@pytest.mark.parametrize(
    ("setting", "field", "message"),
    [
        ("startcmd: ./run.sh", {"startcmd": "./run.sh"},
         f"the startcmd of r2 is on simulated node r2, {_NO_OS}"),
        ("cpu: 0.5", {"cpu_cores": 0.5}, f"simulated node r2 has a CPU limit, {_EMULATED_ONLY}"),
        ("cpu_pin: [1]", {"cpu_pin": (1,)}, f"simulated node r2 has CPU pinning, {_EMULATED_ONLY}"),
        ("memory: 64MB", {"memory_bytes": 64 << 20},
         f"simulated node r2 has a memory limit, {_EMULATED_ONLY}"),
        ("sysctls: {net.ipv4.tcp_ecn: 1}", {"sysctls": {"net.ipv4.tcp_ecn": "1"}},
         f"simulated node r2 has sysctls, {_EMULATED_ONLY}"),
    ],
)  # fmt: skip
def test_what_a_simulated_node_cannot_have_is_refused_at_its_line_never_ignored(
    tmp_path, setting, field, message
):
    path = tmp_path / "t.yaml"
    path.write_text(HYBRID.replace("{name: r2, simulated: true}",
                                   f"{{name: r2, simulated: true,\n   {setting}}}"))  # fmt: skip
    with pytest.raises(UserError) as caught:
        load(path)
    assert str(caught.value) == f"t.yaml:4: {message}"  # the setting's own line
    # An experiment built otherwise (the Python API) is refused by the back end, unlocated.
    exp = build(HYBRID)
    nodes = [n.model_copy(update=field) if n.name == "r2" else n for n in exp.nodes]
    with pytest.raises(UserError) as caught:
        plan(exp.model_copy(update={"nodes": nodes}))
    assert str(caught.value) == message


def test_a_program_on_a_simulated_node_is_refused_at_its_line_and_by_the_back_end(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(HYBRID + "programs: [{name: p, node: r1, command: sleep 1}]\n")
    with pytest.raises(UserError) as caught:
        load(path)
    assert str(caught.value) == f"t.yaml:9: program p is on simulated node r1, {_NO_OS}"
    exp = build(HYBRID)
    program = Program(name="p", node="r1", command="sleep 1")
    with pytest.raises(UserError) as caught:
        plan(exp.model_copy(update={"programs": (program,)}))
    assert str(caught.value) == f"program p is on simulated node r1, {_NO_OS}"


def test_events_on_a_simulated_link_become_nestbed_sim_settings():
    from nestbed.backend import simplan
    from nestbed.model.events import link_after_event

    exp = build(HYBRID + "events: [{at: 1, object: core, verb: down}]\n")
    core = exp.links[0]
    assert "core" in plan(exp).simulation.link_names
    slower = link_after_event(core, core, "bandwidth", ("1Mb",))
    assert simplan.settings(slower) == "p2p-set core 1000000 1000000 0.02 50 50 0.01 0.01"
    lossless = link_after_event(slower, core, "plr", ("0",))
    longer = link_after_event(lossless, core, "delay", ("40ms",))
    assert simplan.settings(longer) == "p2p-set core 1000000 1000000 0.04 50 50 0.0 0.0"
    limited = link_after_event(core, core, "queue-set", ("r1", "limit_", "9000"))
    in_bytes = link_after_event(limited, core, "queue-set", ("r1", "queue-in-bytes_", "1"))
    assert simplan.settings(in_bytes).endswith(" 9000B 50 0.01 0.01")
    reset = link_after_event(in_bytes, core, "reset", ())
    assert simplan.settings(reset).endswith(" 50 50 0.01 0.01")


def _lan_pipes(words: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Each member's egress and ingress pipe (RATE DELAY QUEUE LOSS JITTER MANGLE) in the
    words of a `lan` statement (after its name: NODE ADDR EGRESS INGRESS ...)."""
    members = [words[k : k + 14] for k in range(2, len(words), 14)]
    return {m[0]: (m[2:8], m[8:14]) for m in members}


def test_a_simulated_lans_members_have_its_shaping_split_into_their_two_pipes_as_linkds():
    from nestbed.backend import simplan

    text = HYBRID.replace(
        "links:\n",
        "lans:\n  - {name: ether, members: [r1, r2], bandwidth: 10Mb, delay: 4ms, loss: 0.02, "
        "simulated: true}\nlinks:\n",
    )
    exp = build(text)
    lan = exp.lans[0]
    statement = next(s for s in plan(exp).simulation.links if s.startswith("lan "))
    words = statement.split()
    assert words[:4] == ["lan", "ether", "r1", "10.1.1.2/24"]
    pipes = _lan_pipes(words)
    assert list(pipes) == ["r1", "r2"]
    for egress, ingress in pipes.values():
        for pipe in (egress, ingress):
            # Half the delay each way to and from the switch, and half the loss: 2 % between
            # any two members, as on an emulated LAN.
            assert pipe[:3] == ["10000000", "0.002", "50"] and pipe[4:] == ["0", "0"]
            assert 1 - (1 - float(pipe[3])) ** 2 == pytest.approx(0.02)
    settings = simplan.settings(lan).split()
    assert settings[:2] == ["lan-set", "ether"]
    assert settings[2:] == [w for e, i in pipes.values() for w in e + i]


def test_a_simulated_lans_members_each_have_their_own_rate_delay_queue_and_loss():
    words = _lan_words("members: [{node: r1, egress: {bandwidth: 1Mb, delay: 3ms, drop_packets: "
                       "[2]}}, {node: r2, ingress: {bandwidth: 5Mb, delay: 7ms, queue: {limit: 9},"
                       " gilbert_elliott: {p: 0.05, r: 0.25}}}]")  # fmt: skip
    pipes = _lan_pipes(words)
    assert pipes["r1"][0] == ["1000000", "0.003", "50", "0.0@2", "0", "0"]
    assert pipes["r1"][1] == ["0", "0.0", "50", "0.0", "0", "0"]
    assert pipes["r2"][1] == ["5000000", "0.007", "9", "ge/0.05/0.25/1.0/0.0", "0", "0"]
    # An event's lan-set keeps each member's own: here after r2's queue changed.
    from nestbed.backend import simplan
    from nestbed.model.events import link_after_event

    text = HYBRID.replace("links:\n", "lans:\n  - {name: ether, members: [{node: r1, egress: "
                          "{drop_packets: [2]}}, r2]}\nlinks:\n")  # fmt: skip
    lan = build(text).lans[0]
    changed = link_after_event(lan, lan, "queue-set", ("r2", "limit_", "9"))
    words = simplan.settings(changed).split()
    assert words[2:6] == ["0", "0.0", "50", "0.0@2"]  # r1's egress
    assert words[14:18] == ["0", "0.0", "9", "0.0"]  # r2's egress


def test_jitter_duplication_and_corruption_of_a_simulated_lan_are_its_members_sending():
    pipes = _lan_pipes(_lan_words("members: [r1, r2], jitter: 1ms, duplicate: 0.01, "
                                  "corrupt: 0.02"))  # fmt: skip
    for egress, ingress in pipes.values():
        assert egress[4:] == ["0.001/uniform/0", "0.01/0.02"]
        assert ingress[4:] == ["0", "0"]


def test_emulated_nodes_of_a_hybrid_experiment_send_no_duplicate_sacks():
    p = plan(build(HYBRID))
    assert all(n.sysctls["net.ipv4.tcp_dsack"] == "0" for n in p.nodes)
    mine = HYBRID.replace("{name: h1}", "{name: h1, sysctls: {net.ipv4.tcp_dsack: '1'}}")
    assert plan(build(mine)).node("h1").sysctls["net.ipv4.tcp_dsack"] == "1"
    assert "net.ipv4.tcp_dsack" not in plan(build(TWO_EMULATED)).node("a").sysctls


TWO_EMULATED = "nodes: [{name: a}, {name: b}]\nlinks: [{name: l, members: [a, b]}]\n"


def _core(options: str) -> str:
    """HYBRID with the simulated core's options replaced by OPTIONS."""
    return HYBRID.replace("bandwidth: 2Mb, delay: 20ms, loss: 0.01, simulated: true", options)


def test_duplication_and_corruption_are_the_simulators_on_a_link_each_way():
    from nestbed.backend import simplan

    exp = build(_core("delay: 20ms, duplicate: 0.05, corrupt: 0.01"))
    assert plan(exp).simulation.links[0].endswith(" 0.0 0.0 0 0 0.05/0.01 0.05/0.01")
    one_way = (
        "delay: 20ms, simulated: true,\n     members: [{node: r1, egress: {corrupt: 0.2}}, r2]"
    )
    exp = build(_core(one_way).replace("members: [r1, r2], ", ""))
    assert simplan.settings(exp.links[0]).endswith(" 0.0 0.0 0 0 0.0/0.2 0")
    with_jitter = build(_core("delay: 20ms, jitter: 1ms, duplicate: 0.5"))
    assert (
        plan(with_jitter)
        .simulation.links[0]
        .endswith(" 0.001/uniform/0 0.001/uniform/0 0.5/0.0 0.5/0.0")
    )
    # Both halves of one way (a front end gives a link's members no ingress of their own; a
    # model built otherwise may have one): refused, as two jitters are.
    from nestbed.model.simulated import gaps

    core = build(_core("delay: 20ms, duplicate: 0.1")).links[0]
    r2 = core.ports[1]
    both = core.model_copy(update={"ports": (
        core.ports[0],
        r2.model_copy(update={"ingress": r2.ingress.model_copy(update={"duplicate": 0.1})}))})  # fmt: skip
    assert [g.sentence for g in gaps(both)] == [
        "simulated link core has duplication on both halves of the way from r1 to r2; give "
        "that direction one"
    ]


def test_an_unshaped_simulated_link_ignores_its_shaping_as_an_emulated_one_does():
    exp = build(_core("bandwidth: 2Mb, delay: 20ms, jitter: 1ms, noshaping: true"))
    assert plan(exp).simulation.links[0].endswith(" r2 10.1.1.3/24 0 0 0.0 50 50 0.0 0.0")


def test_queue_limits_are_linkds_each_way():
    # 100 Mb/s one way, 1 Mb/s the other, 20 ms: linkd's default is each direction's
    # bandwidth-delay product for twice the delay in 1538-byte frames, at least 50 packets
    both = "delay: 20ms, simulated: true,\n     members: [{node: r1, egress: {bandwidth: 100Mb}},"
    exp = build(_core(both + " {node: r2, egress: {bandwidth: 1Mb}}]").replace(
        "members: [r1, r2], ", ""
    ))  # fmt: skip
    words = plan(exp).simulation.links[0].split()
    assert words[6:11] == ["100000000", "1000000", "0.02", "326", "50"]
    limited = _core("delay: 20ms, simulated: true,\n     members: [{node: r1, egress: "
                    "{queue: {limit: 7}}}, {node: r2, egress: {queue: {limit: 9}}}]")  # fmt: skip
    words = plan(build(limited.replace("members: [r1, r2], ", ""))).simulation.links[0].split()
    assert words[9:11] == ["7", "9"]


def _lan_words(options: str) -> list[str]:
    """The words of the nestbed-sim statement of HYBRID's simulated LAN of r1 and r2 with
    OPTIONS."""
    text = HYBRID.replace("links:\n", f"lans:\n  - {{name: ether, {options}}}\nlinks:\n")
    return next(s for s in plan(build(text)).simulation.links if s.startswith("lan ")).split()


def test_gilbert_elliott_loss_is_the_simulators_on_a_link_and_a_lan_members_sending():
    from nestbed.backend import simplan

    exp = build(_core("delay: 20ms, gilbert_elliott: {p: 0.05, r: 0.25}"))
    assert plan(exp).simulation.links[0].endswith(" ge/0.05/0.25/1.0/0.0 ge/0.05/0.25/1.0/0.0")
    # On a LAN, what each member sends (its egress pipe's, as on an emulated LAN).
    pipes = _lan_pipes(_lan_words("members: [r1, r2], gilbert_elliott: {p: 0.05, r: 0.25}"))
    assert [(e[3], i[3]) for e, i in pipes.values()] == [("ge/0.05/0.25/1.0/0.0", "0.0")] * 2
    core = exp.links[0]
    from nestbed.model.events import link_after_event

    assert simplan.settings(link_after_event(core, core, "plr", ("0.1",))).endswith(" 0.1 0.1")


def test_jitter_is_the_simulators_on_a_link_each_way():
    exp = build(_core("delay: 20ms, jitter: 2ms, jitter_distribution: normal"))
    assert plan(exp).simulation.links[0].endswith(" 0.0 0.0 0.002/normal/0 0.002/normal/0")


def test_drops_by_ordinal_are_the_simulators_on_a_link_and_a_lan_members_pipes():
    exp = build(_core("delay: 20ms, drop_packets: [3, 17]"))
    assert plan(exp).simulation.links[0].endswith(" 50 50 0.0@3,17 0.0@3,17")
    words = _lan_words("members: [{node: r1, egress: {drop_packets: [2]}}, {node: r2, ingress: "
                       "{drop_packets: [3]}}]")  # fmt: skip
    pipes = _lan_pipes(words)
    assert [(e[3], i[3]) for e, i in pipes.values()] == [("0.0@2", "0.0"), ("0.0", "0.0@3")]
