"""ns-2 files all the way to the IR: Emulab's meaning of the commonest constructs."""

from __future__ import annotations

import textwrap

import pytest

from nestbed.errors import SpecError
from nestbed.spec import load

HEAD = "set ns [new Simulator]\nsource tb_compat.tcl\n"


def ir(tmp_path, body: str, **kwargs):
    path = tmp_path / "t.ns"
    path.write_text(HEAD + textwrap.dedent(body) + "$ns run\n")
    return load(path, **kwargs).experiment


def test_loops_arrays_and_names(tmp_path):
    exp = ir(
        tmp_path,
        """
        for {set i 0} {$i < 3} {incr i} { set n($i) [$ns node] }
        set x [set y [$ns node]]
        $ns duplex-link $n(0) $y 10Mb 20ms DropTail
        """,
    )
    assert [n.name for n in exp.nodes] == ["n-0", "n-1", "n-2", "y"]
    assert [p.node for p in exp.links[0].ports] == ["n-0", "y"]


def test_node_lan_delay_is_the_node_to_switch_half(tmp_path):
    exp = ir(
        tmp_path,
        """
        set a [$ns node]; set b [$ns node]; set c [$ns node]
        set lan0 [$ns make-lan "$a $b $c" 100Mb 10ms]
        tb-set-node-lan-delay $c $lan0 40ms
        tb-set-lan-loss $lan0 0.19
        """,
    )
    a, _, c = exp.lans[0].ports
    assert (a.egress.delay_s, a.ingress.delay_s, c.egress.delay_s, c.ingress.delay_s) == (
        0.005,
        0.005,
        0.04,
        0.04,
    )
    assert 1 - (1 - a.egress.loss) * (1 - c.ingress.loss) == pytest.approx(0.19)


def test_simplex_params_queue_and_addresses(tmp_path):
    exp = ir(
        tmp_path,
        """
        set a [$ns node]; set b [$ns node]
        set l [$ns duplex-link $a $b 10Mb 20ms RED]
        tb-set-link-simplex-params $l $a 50ms 1Mb 0.1
        [[$ns link $b $a] queue] set limit_ 30
        [[$ns link $b $a] queue] set thresh_ 4
        tb-set-ip-link $b $l 172.16.0.9
        """,
    )
    a, b = exp.links[0].ports
    assert (a.egress.delay_s, a.egress.bandwidth_bps, a.egress.loss, a.egress.queue.kind) == (
        0.05,
        1_000_000,
        0.1,
        "red",
    )
    assert (b.egress.delay_s, b.egress.queue.limit, b.egress.queue.thresh) == (0.02, 30, 4)
    assert (b.ip, a.ip, exp.links[0].subnet) == ("172.16.0.9", "172.16.0.2", "172.16.0.0/24")


def test_events_programs_traffic_and_env(tmp_path):
    exp = ir(
        tmp_path,
        """
        set opt(bw) 5Mb
        set a [$ns node]; set b [$ns node]
        set l [$ns duplex-link $a $b $opt(bw) 1ms DropTail]
        set udp [new Agent/UDP]; $ns attach-agent $a $udp
        set sink [new Agent/Null]; $ns attach-agent $b $sink
        $ns connect $udp $sink
        set cbr [new Application/Traffic/CBR]; $cbr attach-agent $udp
        $cbr set interval_ 0.01
        set p [$a program-agent -command "echo hi" -timeout 5]
        $ns at 1h20m3s "$l down; $cbr start"
        $ns at 2 "$p start"
        """,
    )
    assert exp.env == {"bw": "5Mb"}
    assert exp.links[0].ports[0].egress.bandwidth_bps == 5_000_000
    assert exp.applications[0].interval_s == 0.01
    assert (exp.programs[0].command, exp.programs[0].timeout_s) == ("echo hi", 5.0)
    assert [(e.time_s, e.object, e.verb) for e in exp.events] == [
        (2.0, "p", "start"),
        (4803.0, "l", "down"),
        (4803.0, "cbr", "start"),
    ]
    assert exp.events[1].where.file == "t.ns" and exp.events[1].where.line == 13


def test_parameters_override_options(tmp_path):
    body = """
        $ns define-template-parameter BW 10Mb
        set a [$ns node]; set b [$ns node]
        $ns duplex-link $a $b $BW 1ms DropTail
        """
    assert ir(tmp_path, body).links[0].ports[0].egress.bandwidth_bps == 10_000_000
    assert (
        ir(tmp_path, body, parameters={"BW": "2Mb"}).links[0].ports[0].egress.bandwidth_bps
        == 2_000_000
    )


def problems(tmp_path, lines: str) -> list[str]:
    path = tmp_path / "t.ns"
    path.write_text(HEAD + "set a [$ns node]\nset b [$ns node]\n" + lines + "$ns run\n")
    with pytest.raises(SpecError) as info:
        load(path)
    return [str(p) for p in info.value.problems]


def test_resolver_errors_point_at_the_ns_line(tmp_path):
    assert problems(tmp_path, "$ns duplex-link $a $b 10MB 1ms DropTail\n") == [
        "t.ns:5: link link0: bandwidth '10MB' has unknown unit 'MB'; write bits per second with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted"
    ]


def test_unknown_verb_in_an_ns_event(tmp_path):
    lines = 'set l [$ns duplex-link $a $b 1Mb 1ms DropTail]\n$ns at 3 "$l explode"\n'
    assert problems(tmp_path, lines) == [
        "t.ns:6: event l explode: 'explode' is not a verb of link l; valid verbs are bandwidth, delay, down, plr, queue-set, reset, up"
    ]


def test_script_errors_and_meaning_errors_are_reported_together(tmp_path):
    found = problems(tmp_path, "$ns duplex-link $a $b 10MB 1ms DropTail\nfrobnicate\n")
    assert [p[:8] for p in found] == ["t.ns:5: ", "t.ns:6: "]
    assert "10MB" in found[0] and "frobnicate" in found[1]


def test_subnets_follow_creation_order_across_links_and_lans(tmp_path):
    exp = ir(
        tmp_path,
        """
        set a [$ns node]; set b [$ns node]; set c [$ns node]
        set lan0 [$ns make-lan "$a $b $c" 100Mb 0ms]
        set l0 [$ns duplex-link $a $b 10Mb 1ms DropTail]
        """,
    )
    assert (exp.lans[0].subnet, exp.links[0].subnet) == ("10.1.1.0/24", "10.1.2.0/24")
