"""Experiment files Emulab or ns-2 accept mean the same here (issue 16, construct classes 1-6).

Each test is a small file of our own reproducing one construct seen in public Emulab, DETER
and ns-2 experiment files, checked through to the IR: names, topology, shaping, events and
warnings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ns_helpers import PRELUDE, line

from nestbed.errors import SpecError
from nestbed.model import Experiment
from nestbed.spec import load

N2 = "set n0 [$ns node]\nset n1 [$ns node]\n"


def parse(tmp_path: Path, body: str, *, file: str = "t.ns", raw: bool = False) -> Experiment:
    text = body if raw else PRELUDE + body.strip("\n") + "\n$ns run\n"
    path = tmp_path / file
    path.write_text(text)
    return load(path).experiment


def warnings(exp: Experiment) -> list[tuple[str, int | None]]:
    return [(w.message, w.where.line if w.where else None) for w in exp.warnings]


def port(exp: Experiment, link: str, node: str):  # type: ignore[no-untyped-def]
    links = {x.name: x for x in exp.links + exp.lans}
    return links[link].port(node)


# -- 1. an object's Tcl name is its variable's name -----------------------------------------


def test_bare_names_refer_to_objects(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        "set ping [$ns node]\nset pong [$ns node]\nset nodeA [$ns node]\nset nodeB [$ns node]\n"
        "set link0 [$ns duplex-link ping pong 10Mb 5ms DropTail]\n"
        'set lan0 [$ns make-lan "nodeA nodeB ping" 100Mb 0ms]\n'
        "tb-set-ip-link ping link0 192.168.1.1\n"
        "tb-set-ip-lan nodeA lan0 10.1.1.5\n"
        "tb-set-node-os nodeB UBUNTU22-64-STD\n",
    )
    assert [n.name for n in exp.nodes] == ["ping", "pong", "nodeA", "nodeB"]
    assert port(exp, "link0", "ping").ip == "192.168.1.1"
    assert port(exp, "lan0", "nodeA").ip == "10.1.1.5"
    assert exp.nodes[3].os == "UBUNTU22-64-STD"


def test_tb_set_ip_by_bare_name(tmp_path: Path) -> None:
    exp = parse(tmp_path, N2 + "$ns duplex-link n0 n1 1Mb 1ms DropTail\ntb-set-ip n0 10.9.9.1")
    assert port(exp, "link0", "n0").ip == "10.9.9.1"


def test_name_built_from_renamed_objects(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        "set router [$ns node]\nset h1 [$ns node]\nset net pa\n"
        'set lan [set lan$router$net [$ns make-lan "$router $h1" 100Mb 0ms]]\n'
        "tb-set-lan-loss $lan 0.01\n",
    )
    assert [x.name for x in exp.lans] == ["lanrouterpa"]
    assert exp.lans[0].ports[0].egress.loss > 0


def test_arrays_and_loops_name_objects(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        "for {set i 0} {$i < 3} {incr i} { set n($i) [$ns node] }\n"
        "for {set i 1} {$i < 3} {incr i} {\n"
        "    set l($i) [$ns duplex-link $n(0) n-$i 1Mb 1ms DropTail]\n}\n",
    )
    assert [n.name for n in exp.nodes] == ["n-0", "n-1", "n-2"]
    assert [x.name for x in exp.links] == ["l-1", "l-2"]


# -- 2. names ---------------------------------------------------------------------------------


def test_programs_agents_and_groups_may_contain_underscores(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "$ns duplex-link $n0 $n1 10Mb 1ms DropTail\n"
        "set tcp_src [new Agent/TCP]\n$ns attach-agent $n0 $tcp_src\n"
        "set tcp_sink [new Agent/TCPSink]\n$ns attach-agent $n1 $tcp_sink\n"
        "$ns connect $tcp_src $tcp_sink\n"
        "set cbr_udp [new Application/FTP]\n$cbr_udp attach-agent $tcp_src\n"
        'set prog_simple [$n0 program-agent -command "echo hi"]\n'
        "set grp_all [$ns event-group [list $prog_simple]]\n"
        "set seq_one [$ns event-sequence {\n  $prog_simple start\n}]\n"
        '$ns at 1 "$cbr_udp start"\n$ns at 2 "$grp_all start"\n',
    )
    assert [a.name for a in exp.agents] == ["tcp_src", "tcp_sink"]
    assert [a.name for a in exp.applications] == ["cbr_udp"]
    assert [p.name for p in exp.programs] == ["prog_simple"]
    assert [g.name for g in exp.groups] == ["grp_all"]
    assert [s.name for s in exp.sequences] == ["seq_one"]


def test_node_names_stay_host_names(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"node name 'n_0' .* letters, digits and '-'"):
        parse(tmp_path, "set n_0 [$ns node]")


@pytest.mark.parametrize(
    ("file", "name"),
    [("basic_rsrv.ns", "basic-rsrv"), ("014_lab_basic.ns", "014-lab-basic"), ("a.b c.ns", "a-b-c")],
)
def test_experiment_name_from_file_name_never_fails(tmp_path: Path, file: str, name: str) -> None:
    exp = parse(tmp_path, "set n0 [$ns node]", file=file)
    assert exp.name == name
    stem = Path(file).stem
    assert (
        f"the experiment is named '{name}' after the file name '{stem}', which is not a valid "
        "name (only letters, digits and '-'); pass --name to choose another"
    ) in [m for m, _ in warnings(exp)]


# -- 3. Emulab's lenience ---------------------------------------------------------------------


def test_misspelt_queue_type_falls_back_to_droptail(tmp_path: Path) -> None:
    exp = parse(tmp_path, N2 + "$ns duplex-link $n0 $n1 10Mb 1ms Droptail")
    assert exp.links[0].ports[0].egress.queue.kind == "droptail"
    assert (
        "duplex-link: queue type 'Droptail' is not supported; using DropTail, as Emulab does "
        "(the supported types are DropTail, RED and GRED)",
        line(3),
    ) in warnings(exp)


def test_unsupported_routing_protocol_is_ignored(tmp_path: Path) -> None:
    exp = parse(tmp_path, N2 + "$ns duplex-link $n0 $n1 10Mb 1ms DropTail\n$ns rtproto DV")
    assert exp.routing == "none"
    assert any("rtproto 'DV' is not supported; ignored" in m for m, _ in warnings(exp))


def test_two_interfaces_of_a_node_in_one_subnet(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "set n2 [$ns node]\n"
        "set l1 [$ns duplex-link $n0 $n1 10Mb 1ms DropTail]\n"
        "set l2 [$ns duplex-link $n0 $n2 10Mb 1ms DropTail]\n"
        "tb-set-ip-link $n0 $l1 10.1.1.1\ntb-set-ip-link $n1 $l1 10.1.1.2\n"
        "tb-set-ip-link $n0 $l2 10.1.1.3\ntb-set-ip-link $n2 $l2 10.1.1.4\n",
    )
    assert [p.ip for x in exp.links for p in x.ports] == [
        "10.1.1.1",
        "10.1.1.2",
        "10.1.1.3",
        "10.1.1.4",
    ]


def test_addresses_that_collide_are_still_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"address 10\.1\.1\.1 is given to both"):
        parse(
            tmp_path,
            N2 + "set n2 [$ns node]\n"
            "set l1 [$ns duplex-link $n0 $n1 10Mb 1ms DropTail]\n"
            "set l2 [$ns duplex-link $n0 $n2 10Mb 1ms DropTail]\n"
            "tb-set-ip-link $n0 $l1 10.1.1.1\ntb-set-ip-link $n0 $l2 10.1.1.1\n",
        )


@pytest.mark.parametrize(
    ("text", "bps"),
    [("1mb", 1_000_000), ("10kb", 10_000), ("2gb", 2_000_000_000), ("5m", 5_000_000)],
)
def test_lowercase_units_as_ns2_reads_them(tmp_path: Path, text: str, bps: int) -> None:
    exp = parse(tmp_path, N2 + f"$ns duplex-link $n0 $n1 {text} 1ms DropTail")
    assert exp.links[0].ports[0].egress.bandwidth_bps == bps


# -- 4. DETER and later Emulab commands -------------------------------------------------------


def test_later_emulab_commands(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "$ns duplex-link $n0 $n1 10Mb 1ms DropTail\n"
        "tb-add-node-attribute $n0 ROOTDISK 40\n"
        "tb-elab-in-elab 0\n"
        "tb-set-node-failure-action $n1 nonfatal\n"
        "tb-set-sync-server $n0\n"
        "set bs [$ns blockstore]\n$bs set-class local\n$bs set-placement sysvol\n"
        "$bs set-mount-point /mydata\n$bs set-node $n0\n"
        "set grp [new EventGroup $ns]\n$grp add $n0 $n1\n",
    )
    assert [x.command for x in exp.inert] == [
        "tb-add-node-attribute",
        "tb-elab-in-elab",
        "tb-set-node-failure-action",
        "tb-set-sync-server",
    ]
    got = [m for m, _ in warnings(exp)]
    assert any(m.startswith("$ns blockstore: nestbed has no block stores") for m in got)
    assert sum("blockstore method '" in m for m in got) == 4
    assert [(g.name, g.members) for g in exp.groups] == [("grp", ("n0", "n1"))]


def test_bridge_is_refused_with_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        parse(tmp_path, N2 + "set br [$ns bridge]")
    assert [(p.message, p.line) for p in info.value.problems] == [
        (
            "$ns bridge is not supported: nestbed has no bridge nodes; join the nodes with one "
            "LAN (`$ns make-lan`) instead",
            line(3),
        )
    ]


# -- 5. plain ns-2 scripts --------------------------------------------------------------------


def test_ns1_style_commands(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        "set n0 [ns node]\nset n1 [ns node]\nns duplex-link $n0 $n1 1.5Mb 10ms DropTail\nns run\n",
        raw=True,
    )
    assert [n.name for n in exp.nodes] == ["n0", "n1"]
    assert exp.links[0].ports[0].egress.bandwidth_bps == 1_500_000


def test_two_simplex_links_are_one_link_shaped_per_direction(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "$ns simplex-link $n0 $n1 10Mb 5ms DropTail\n$ns simplex-link $n1 $n0 1Mb 50ms RED",
    )
    assert len(exp.links) == 1
    a, b = exp.links[0].ports
    assert (a.node, a.egress.bandwidth_bps, a.egress.delay_s) == ("n0", 10_000_000, 0.005)
    assert (b.node, b.egress.bandwidth_bps, b.egress.delay_s) == ("n1", 1_000_000, 0.05)
    assert (a.egress.queue.kind, b.egress.queue.kind) == ("droptail", "red")
    assert not [m for m, _ in warnings(exp) if "simplex" in m]


def test_lone_simplex_link_is_shaped_one_way(tmp_path: Path) -> None:
    exp = parse(tmp_path, N2 + "$ns simplex-link $n0 $n1 10Mb 5ms DropTail")
    a, b = exp.links[0].ports
    assert (a.egress.bandwidth_bps, a.egress.delay_s) == (10_000_000, 0.005)
    assert not b.egress.is_shaped
    assert (
        "simplex-link from n0 to n1 has no simplex-link back; nestbed links carry packets both "
        "ways, so link link0 is shaped from n0 to n1 only",
        line(3),
    ) in warnings(exp)


def test_procedure_named_in_at_is_a_warning_and_its_exit_ends_the_run(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "$ns duplex-link $n0 $n1 10Mb 1ms DropTail\n"
        "proc finish {} {\n    global ns\n    $ns flush-trace\n    exit 0\n}\n"
        "proc report {} { puts done }\n"
        '$ns at 4.0 "report"\n$ns at 5.5 "finish"\n',
    )
    assert [(e.time_s, e.object, e.verb) for e in exp.events] == [(5.5, "ns", "halt")]
    got = warnings(exp)
    assert (
        "event at 4.0: procedure 'report' runs only in the simulator (`nestbed simulate`); "
        "ignored in emulation",
        line(10),
    ) in got
    assert (
        "event at 5.5: procedure 'finish' runs only in the simulator; in emulation it is "
        "ignored, and as it calls exit the run ends there (like `$ns halt`)",
        line(11),
    ) in got


def test_simulation_only_event_verbs_are_warnings(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "$ns duplex-link $n0 $n1 10Mb 1ms DropTail\n"
        "set tcp [new Agent/TCP]\n$ns attach-agent $n0 $tcp\n"
        "set sink [new Agent/TCPSink]\n$ns attach-agent $n1 $sink\n$ns connect $tcp $sink\n"
        '$ns at 3 "$ns detach-agent $n0 $tcp"\n$ns at 4 "$ns nam-end-wireless 4"\n'
        '$ns at 5 "$ns flush-trace; $ns halt"\n',
    )
    assert [(e.time_s, e.verb) for e in exp.events] == [(5.0, "halt")]
    got = [m for m, _ in warnings(exp)]
    for verb in ("detach-agent", "nam-end-wireless", "flush-trace"):
        assert (
            f"'$ns {verb}' only matters to the simulator (`nestbed simulate`); ignored in emulation"
            in " ".join(got)
        )


def test_trace_setup_and_class_defaults_of_ns2(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        "set tf [open out.tr w]\n$ns trace-all $tf\nset nf [open out.nam w]\n$ns namtrace-all $nf\n"
        "Agent/TCP set window_ 20\nQueue/DropTail set limit_ 50\n"
        + N2
        + "$ns duplex-link $n0 $n1 10Mb 1ms DropTail\n"
        "set lm [new Agent/LossMonitor]\n$ns attach-agent $n1 $lm\n"
        "set rv [new RandomVariable/Uniform]\n$rv set min_ 1\n",
    )
    assert [a.kind for a in exp.agents] == ["null"]
    got = [m for m, _ in warnings(exp)]
    assert any(m.startswith("'Agent/TCP set' acts on the ns-2 class Agent/TCP") for m in got)
    assert any(m.startswith("class 'RandomVariable/Uniform' is not supported") for m in got)
    assert not (tmp_path / "out.tr").exists()


# -- 6. one agent with two peers; the two-argument link event ---------------------------------


def test_one_sink_with_two_sources(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "set n2 [$ns node]\nset r [$ns node]\n"
        "$ns duplex-link $n0 $r 10Mb 1ms DropTail\n$ns duplex-link $n1 $r 10Mb 1ms DropTail\n"
        "$ns duplex-link $n2 $r 10Mb 1ms DropTail\n"
        "set udp0 [new Agent/UDP]\n$ns attach-agent $n0 $udp0\n"
        "set udp1 [new Agent/UDP]\n$ns attach-agent $n1 $udp1\n"
        "set sink [new Agent/Null]\n$ns attach-agent $n2 $sink\n"
        "$ns connect $udp0 $sink\n$ns connect $udp1 $sink\n",
    )
    peers = {a.name: a.peer for a in exp.agents}
    assert peers["udp0"] == "sink" and peers["udp1"] == "sink"


def test_link_event_with_duplex_argument(tmp_path: Path) -> None:
    exp = parse(
        tmp_path,
        N2 + "set link0 [$ns duplex-link $n0 $n1 10Mb 1ms DropTail]\n"
        '$ns at 10 "$link0 bandwidth 1Mb duplex"\n$ns at 20 "$link0 delay 5ms duplex"\n',
    )
    assert [(e.verb, e.args) for e in exp.events] == [
        ("bandwidth", ("1Mb",)),
        ("delay", ("5ms",)),
    ]
