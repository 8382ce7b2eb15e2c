"""Every ns-2 / Emulab construct, at the document level: body → field of the document."""

from __future__ import annotations

from typing import Any

import pytest
from ns_helpers import get, line

N3 = "set n0 [$ns node]\nset n1 [$ns node]\nset n2 [$ns node]\n"
LINK = N3 + "set link0 [$ns duplex-link $n0 $n1 10Mb 20ms DropTail]\n"
LAN = N3 + 'set lan0 [$ns make-lan "$n0 $n1 $n2" 100Mb 10ms]\n'
UDP = (
    LINK
    + "set udp [new Agent/UDP]\n$ns attach-agent $n0 $udp\n"
    + "set null [new Agent/Null]\n$ns attach-agent $n1 $null\n$ns connect $udp $null\n"
    + "set cbr [new Application/Traffic/CBR]\n$cbr attach-agent $udp\n"
)

CASES: list[tuple[str, str, Any]] = [
    # nodes and node settings
    ("set n0 [$ns node]", "nodes.0.name", "n0"),
    (N3 + "tb-set-node-os $n0 UBUNTU22", "nodes.0.os", "UBUNTU22"),
    (N3 + "tb-set-hardware $n1 pc3000", "nodes.1.hardware", "pc3000"),
    (N3 + 'tb-set-node-startcmd $n0 "run.sh"', "nodes.0.startcmd", "run.sh"),
    (N3 + 'tb-set-node-startup $n0 "up.sh"', "nodes.0.startcmd", "up.sh"),
    (N3 + "tb-fix-node $n2 pc7", "nodes.2.fix", "pc7"),
    (N3 + "nb-set-node-cpu $n0 0.5", "nodes.0.cpu", 0.5),
    (N3 + "nb-set-node-cpu-pin $n0 {2 3}", "nodes.0.cpu_pin", [2, 3]),
    (N3 + "nb-set-node-memory $n0 512MB", "nodes.0.memory", "512MB"),
    (
        N3 + "nb-set-node-sysctl $n0 net.ipv4.ip_forward 1",
        "nodes.0.sysctls",
        {"net.ipv4.ip_forward": "1"},
    ),
    (LINK + "$n0 add-route $n2 $n1", "nodes.0.routes", [{"dst": "n2", "via": "n1"}]),
    (LINK + "$n0 add-route $link0 $n1", "nodes.0.routes.0.dst", "link0"),
    (LINK + "$n0 add-route 10.9.0.0/24 10.1.1.3", "nodes.0.routes.0.via", "10.1.1.3"),
    # links
    (LINK, "links.0.name", "link0"),
    (LINK, "links.0.members", ["n0", "n1"]),
    (LINK, "links.0.bandwidth", "10Mb"),
    (LINK, "links.0.delay", "20ms"),
    (LINK, "links.0.queue.type", "droptail"),
    (N3 + "$ns duplex-link $n0 $n1 1Mb 1ms RED", "links.0.queue.type", "red"),
    (N3 + "$ns duplex-link $n0 $n1 1Mb 1ms GRED", "links.0.queue.type", "gred"),
    (N3 + "set l [$ns duplex-link $n0 $n1 1Mb 1ms DropTail]", "links.0.name", "l"),
    (N3 + "$ns duplex-link $n0 $n1 1Mb 1ms DropTail", "links.0.name", "link0"),
    (LINK + "[[$ns link $n0 $n1] queue] set limit_ 20", "links.0.members.0.egress.queue.limit", 20),
    (LINK + "[[$ns link $n1 $n0] queue] set limit_ 20", "links.0.members.1.egress.queue.limit", 20),
    (
        LINK + "set q [[$ns link $n0 $n1] queue]\n$q set queue-in-bytes_ 1",
        "links.0.members.0.egress.queue.limit_unit",
        "bytes",
    ),
    (
        LINK + "set q [[$ns link $n0 $n1] queue]\n$q set queue-in-bytes_ 0",
        "links.0.members.0.egress.queue.limit_unit",
        "packets",
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set thresh_ 5",
        "links.0.members.0.egress.queue.thresh",
        5.0,
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set maxthresh_ 15",
        "links.0.members.0.egress.queue.maxthresh",
        15.0,
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set q_weight_ 0.002",
        "links.0.members.0.egress.queue.q_weight",
        0.002,
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set linterm_ 10",
        "links.0.members.0.egress.queue.linterm",
        10.0,
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set mean_pktsize_ 500",
        "links.0.members.0.egress.queue.mean_packet_size",
        500,
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set gentle_ 1",
        "links.0.members.0.egress.queue.type",
        "gred",
    ),
    (
        N3 + "$ns duplex-link $n0 $n1 1Mb 1ms GRED\n[[$ns link $n0 $n1] queue] set gentle_ 0",
        "links.0.members.0.egress.queue.type",
        "red",
    ),
    (LINK + "$ns queue-limit $n1 $n0 33", "links.0.members.1.egress.queue.limit", 33),
    (LINK + "$ns cost $n1 $n0 4", "links.0.members.1.cost", 4),
    (LINK + "tb-set-link-loss $link0 0.01", "links.0.loss", "0.01"),
    (LINK + "tb-set-link-loss $n1 $n0 0.02", "links.0.loss", "0.02"),
    (
        LINK + "tb-set-link-simplex-params $link0 $n1 3ms 2Mb 0.1",
        "links.0.members.1.egress",
        {"delay": "3ms", "bandwidth": "2Mb", "loss": "0.1"},
    ),
    (LINK + "tb-set-noshaping $link0 1", "links.0.noshaping", True),
    (LINK + "tb-set-netmask $link0 255.255.255.252", "links.0.netmask", "255.255.255.252"),
    # addresses
    (LINK + "tb-set-ip $n0 10.0.0.1", "links.0.members.0.ip", "10.0.0.1"),
    (LINK + "tb-set-ip-interface $n1 $n0 10.0.0.2", "links.0.members.1.ip", "10.0.0.2"),
    (LINK + "tb-set-ip-link $n1 $link0 10.0.0.3", "links.0.members.1.ip", "10.0.0.3"),
    (LAN + "tb-set-ip-lan $n2 $lan0 10.0.0.4", "lans.0.members.2.ip", "10.0.0.4"),
    # LANs
    (LAN, "lans.0.members", ["n0", "n1", "n2"]),
    (LAN, "lans.0.delay", "10ms"),
    (
        N3 + 'set lan [$ns make-lan "$n0 $n1" 1Mb 0ms LL Queue/RED Mac/802_3 Channel]',
        "lans.0.queue.type",
        "red",
    ),
    (LAN + "tb-set-lan-loss $lan0 0.05", "lans.0.loss", "0.05"),
    (LAN + "tb-set-link-loss $lan0 0.05", "lans.0.loss", "0.05"),
    (
        LAN + "tb-set-node-lan-delay $n1 $lan0 7ms",
        "lans.0.members.1",
        {"node": "n1", "egress": {"delay": "7ms"}, "ingress": {"delay": "7ms"}},
    ),
    (LAN + "tb-set-node-lan-bandwidth $n1 $lan0 7Mb", "lans.0.members.1.ingress.bandwidth", "7Mb"),
    (LAN + "tb-set-node-lan-loss $n1 $lan0 0.3", "lans.0.members.1.egress.loss", "0.3"),
    (
        LAN + "tb-set-node-lan-params $n2 $lan0 1ms 2Mb 0.1",
        "lans.0.members.2.ingress",
        {"delay": "1ms", "bandwidth": "2Mb", "loss": "0.1"},
    ),
    (
        LAN + "tb-set-lan-simplex-params $lan0 $n0 1ms 2Mb 0.1 3ms 4Mb 0.2",
        "lans.0.members.0",
        {
            "node": "n0",
            "egress": {"delay": "1ms", "bandwidth": "2Mb", "loss": "0.1"},
            "ingress": {"delay": "3ms", "bandwidth": "4Mb", "loss": "0.2"},
        },
    ),
    (
        LAN + "[[$ns lanlink $lan0 $n1] queue] set limit_ 9",
        "lans.0.members.1.egress.queue.limit",
        9,
    ),
    # nestbed link extensions (links and LANs)
    (LINK + "nb-set-link-jitter $link0 2ms", "links.0.jitter", "2ms"),
    (LINK + "nb-set-link-jitter $link0 2ms pareto", "links.0.jitter_distribution", "pareto"),
    (LAN + "nb-set-link-jitter $lan0 2ms normal", "lans.0.jitter_distribution", "normal"),
    (LINK + "nb-set-link-reorder $link0 1", "links.0.reorder", True),
    (
        LINK + "nb-set-link-gilbert $link0 0.01 4",
        "links.0.gilbert_elliott",
        {"loss_rate": 0.01, "burst_length": 4.0},
    ),
    (
        LINK + "nb-set-link-gilbert-elliott $link0 0.1 0.5",
        "links.0.gilbert_elliott",
        {"p": 0.1, "r": 0.5},
    ),
    (
        LINK + "nb-set-link-gilbert-elliott $link0 0.1 0.5 0.9 0.01",
        "links.0.gilbert_elliott",
        {"p": 0.1, "r": 0.5, "loss_bad": 0.9, "loss_good": 0.01},
    ),
    (
        LINK + "nb-set-link-drop-packets $link0 $n1 {3 5}",
        "links.0.members.1.egress.drop_packets",
        [3, 5],
    ),
    (LINK + "nb-set-link-duplicate $link0 0.01", "links.0.duplicate", 0.01),
    (LAN + "nb-set-link-corrupt $lan0 0.02", "lans.0.corrupt", 0.02),
    # routing
    ("$ns rtproto Static", "routing", "static"),
    ("$ns rtproto Session", "routing", "session"),
    ("$ns rtproto ospf", "routing", "session"),
    ("$ns rtproto Manual", "routing", "manual"),
    ("tb-set-ip-routing manual", "routing", "manual"),
    ("tb-set-ip-routing static", "routing", "static"),
    # agents and applications
    (UDP, "agents.0", {"name": "udp", "type": "udp", "node": "n0", "peer": "null"}),
    (UDP, "agents.1", {"name": "null", "type": "null", "node": "n1", "peer": "udp"}),
    (UDP + "$udp set fid_ 3", "agents.0.params", {"fid_": "3"}),
    (UDP, "applications.0", {"name": "cbr", "type": "cbr", "agent": "udp"}),
    (UDP + "$cbr set packetSize_ 500", "applications.0.packet_size", "500"),
    (UDP + "$cbr set rate_ 2Mb", "applications.0.rate", "2Mb"),
    (UDP + "$cbr set interval_ 0.01", "applications.0.interval", "0.01"),
    (UDP + "$cbr set maxpkts_ 100", "applications.0.max_packets", 100),
    (UDP + "$cbr set random_ 1", "applications.0.random", True),
    ("set a [new Agent/TCP]\n$ns attach-agent [$ns node] $a", "agents.0.type", "tcp"),
    ("set a [new Agent/TCP/Reno]\n$ns attach-agent [$ns node] $a", "agents.0.variant", "reno"),
    (
        "set a [new Agent/TCP/Newreno]\n$ns attach-agent [$ns node] $a",
        "agents.0.variant",
        "newreno",
    ),
    ("set a [new Agent/TCP/Sack1]\n$ns attach-agent [$ns node] $a", "agents.0.variant", "sack"),
    ("set a [new Agent/TCP/Vegas]\n$ns attach-agent [$ns node] $a", "agents.0.variant", "vegas"),
    (
        "set a [new Agent/TCP/FullTcp]\n$ns attach-agent [$ns node] $a",
        "agents.0.variant",
        "fulltcp",
    ),
    ("set a [new Agent/TCPSink]\n$ns attach-agent [$ns node] $a", "agents.0.type", "tcpsink"),
    (
        "set a [new Agent/TCPSink/DelAck]\n$ns attach-agent [$ns node] $a",
        "agents.0",
        {"name": "a", "type": "tcpsink", "variant": "delack", "node": "node0"},
    ),
    (
        "set t [new Agent/TCP]\n$ns attach-agent [$ns node] $t\nset f [new Application/FTP]\n$f attach-agent $t",
        "applications.0",
        {"name": "f", "type": "ftp", "agent": "t"},
    ),
    # programs
    (
        N3
        + 'set p [$n0 program-agent -command "ls -l" -dir /tmp -timeout 5 -expected-exit-code 2]',
        "programs.0",
        {
            "name": "p",
            "node": "n0",
            "command": "ls -l",
            "dir": "/tmp",
            "timeout": "5",
            "expected_exit_code": 2,
        },
    ),
    (
        N3
        + 'set p [new Program $ns]\n$p set node $n1\n$p set command "echo hi"\n$p set timeout 3s',
        "programs.0",
        {"name": "p", "node": "n1", "command": "echo hi", "timeout": "3s"},
    ),
    # events
    (
        LINK + '$ns at 10.5 "$link0 down"',
        "events.0",
        {"at": "10.5", "object": "link0", "verb": "down"},
    ),
    (LINK + '$ns at 1h20m3s "$link0 up"', "events.0.at", "1h20m3s"),
    (
        LINK + '$ns at 2 "$link0 bandwidth 1Mb; $link0 delay 5ms"',
        "events",
        [
            {"at": "2", "object": "link0", "verb": "bandwidth", "args": ["1Mb"]},
            {"at": "2", "object": "link0", "verb": "delay", "args": ["5ms"]},
        ],
    ),
    (LINK + "$ns at 2 {$link0 plr 0.5}", "events.0.args", ["0.5"]),
    (
        LINK + 'set q [[$ns link $n1 $n0] queue]\n$ns at 3 "$q set limit_ 7"',
        "events.0",
        {"at": "3", "object": "link0", "verb": "queue-set", "args": ["n1", "limit_", "7"]},
    ),
    (
        UDP + '$ns at 1 "$cbr start"\n$ns at 2 "$cbr set rate_ 5Mb"',
        "events.1",
        {"at": "2", "object": "cbr", "verb": "set", "args": ["rate_", "5Mb"]},
    ),
    ('$ns at 9 "$ns halt"', "events.0", {"at": "9", "object": "ns", "verb": "halt"}),
    ('$ns at 9 {$ns log "two words"}', "events.0.args", ["two words"]),
    ('$ns at 9 "$ns message hi\n$ns swapout"', "events.1.verb", "swapout"),
    (
        N3 + 'set p [$n0 program-agent -command ls]\n$ns at 1 "$p kill TERM"',
        "events.0",
        {"at": "1", "object": "p", "verb": "kill", "args": ["TERM"]},
    ),
    (
        LINK + 'set tl [$ns event-timeline]\n$tl at 1 "$link0 down"\n$ns at 5 "$tl start"',
        "timelines",
        [{"name": "tl", "events": [{"at": "1", "object": "link0", "verb": "down"}]}],
    ),
    (LINK + 'set tl [$ns event-timeline]\n$ns at 5 "$tl start"', "events.0.object", "tl"),
    (
        N3
        + "set p0 [$n0 program-agent -command a]\nset p1 [$n1 program-agent -command b]\nset s [$ns event-sequence {$p0 run; $p1 run}]\n$s append {$p0 run}",
        "sequences",
        [
            {
                "name": "s",
                "steps": [
                    {"object": "p0", "verb": "run"},
                    {"object": "p1", "verb": "run"},
                    {"object": "p0", "verb": "run"},
                ],
            }
        ],
    ),
    (
        LINK
        + 'set l1 [$ns duplex-link $n1 $n2 1Mb 1ms DropTail]\nset g [$ns event-group [list $link0 $l1]]\n$ns at 1 "$g down"',
        "groups",
        [{"name": "g", "members": ["link0", "l1"]}],
    ),
    (
        LINK + "set g [$ns event-group]\n$g add $link0\n$g add [list $n0 $n1]",
        "groups.0.members",
        ["link0", "n0", "n1"],
    ),
    (LINK + 'set g [$ns event-group $link0]\n$ns at 1 "$g up"', "events.0.object", "g"),
    # environment, parameters, make-simulated
    ("set opt(rate) 5Mb", "env", {"rate": "5Mb"}),
    (
        "$ns define-template-parameter SIZE 10\nset n [$ns node]\ntb-set-node-os $n OS$SIZE",
        "parameters",
        {"SIZE": "10"},
    ),
    (
        "$ns define-template-parameter SIZE 10\nset n [$ns node]\ntb-set-node-os $n OS$SIZE",
        "nodes.0.os",
        "OS10",
    ),
    (
        N3
        + "$ns make-simulated {\n  set s0 [$ns node]\n  set l [$ns duplex-link $s0 $n0 1Mb 1ms DropTail]\n}",
        "nodes.3",
        {"name": "s0", "simulated": True},
    ),
    (
        N3
        + "$ns make-simulated {\n  set s0 [$ns node]\n  set l [$ns duplex-link $s0 $n0 1Mb 1ms DropTail]\n}",
        "links.0.simulated",
        True,
    ),
    # inert commands are recorded with their arguments (objects by name)
    (
        N3 + "tb-set-node-tarfiles $n0 /opt x.tgz",
        "inert",
        [{"command": "tb-set-node-tarfiles", "args": ["n0", "/opt", "x.tgz"]}],
    ),
    (N3 + "tb-make-soft-vtype A {pc1 pc2}", "inert.0.args", ["A", "pc1 pc2"]),
    # loops, procs, arrays, expr, sourcing other files
    (
        "for {set i 0} {$i < 3} {incr i} {\n  set n($i) [$ns node]\n}",
        "nodes",
        [{"name": "n-0"}, {"name": "n-1"}, {"name": "n-2"}],
    ),
    (
        "proc mk {} {\n  global ns\n  return [$ns node]\n}\nset a [mk]\nset b [mk]",
        "nodes.1.name",
        "b",
    ),
    ("foreach x {a b} {\n  set $x [$ns node]\n}\nset c [$ns node]", "nodes.1.name", "b"),
]

INERT = [
    "tb-set-node-tarfiles",
    "tb-set-tarfiles",
    "tb-set-node-rpms",
    "tb-set-node-cmdline",
    "tb-set-node-failure-action",
    "tb-set-link-failure-action",
    "tb-set-endnodeshaping",
    "tb-use-endnodeshaping",
    "tb-force-endnodeshaping",
    "tb-set-sync-server",
    "tb-make-soft-vtype",
    "tb-make-hard-vtype",
    "tb-make-weighted-vtype",
    "tb-set-colocate-factor",
    "tb-set-cpu-usage",
    "tb-set-mem-usage",
    "tb-set-link-est-bandwidth",
    "tb-set-lan-est-bandwidth",
    "tb-set-multiplexed",
    "tb-set-useveth",
    "tb-set-link-encap",
    "tb-set-allowcolocate",
    "tb-set-security-level",
    "tb-use-ipassign",
]


@pytest.mark.parametrize(
    ("body", "path", "expected"), CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(CASES)]
)
def test_construct(run, body: str, path: str, expected: Any) -> None:
    t = run(body)
    assert t.errors == []
    assert get(t.document, path) == expected


@pytest.mark.parametrize("command", INERT)
def test_inert_commands_are_recorded_and_nothing_else(run, command: str) -> None:
    t = run(f"set n0 [$ns node]\n{command} $n0 1")
    assert t.errors == [] and t.warnings == []
    dumped = t.document.model_dump(exclude_none=True, exclude_defaults=True)
    assert dumped == {
        "nodes": [{"name": "n0"}],
        "inert": [{"command": command, "args": ["n0", "1"]}],
    }
    assert t.locations["inert.0"] == ("t.ns", line(2))


LOCATIONS = [
    (LINK, "nodes.2", 3),
    (LINK, "links.0", 4),
    (LINK, "links.0.bandwidth", 4),
    (LINK + "tb-set-ip $n1 10.0.0.1", "links.0.members.1.ip", 5),
    (LINK + "tb-set-link-simplex-params $link0 $n0 1ms 1Mb 0", "links.0.members.0.egress.delay", 5),
    (LINK + "\n\ntb-set-link-loss $link0 0.1", "links.0.loss", 7),
    (LINK + 'set x 1\n$ns at 1 "$link0 down"', "events.0", 6),
    (LINK + "tb-set-node-os $n0 X", "nodes.0.os", 5),
    ("set opt(x) 1", "env.x", 1),
    ("proc mk {} {\n  global ns\n  return [$ns node]\n}\nset a [mk]", "nodes.0", 3),
    ("for {set i 0} {$i < 2} {incr i} {\n\n  set n($i) [$ns node]\n}", "nodes.1", 3),
    (N3 + "tb-set-node-tarfiles $n0 /x y", "inert.0", 4),
]


@pytest.mark.parametrize(("body", "path", "body_line"), LOCATIONS)
def test_locations(run, body: str, path: str, body_line: int) -> None:
    t = run(body)
    assert t.errors == []
    assert t.locations[path] == ("t.ns", line(body_line))


def test_source_is_relative_to_the_file_and_tb_compat_is_a_no_op(tmp_path) -> None:
    from nestbed.spec.ns import translate

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nodes.tcl").write_text("set b [$ns node]\n")
    main = tmp_path / "main.ns"
    main.write_text(
        "source tb_compat.tcl\nset ns [new Simulator]\nset a [$ns node]\nsource sub/nodes.tcl\n$ns run\n"
    )
    t = translate(main)
    assert t.errors == []
    assert [n.name for n in t.document.nodes] == ["a", "b"]
    assert t.locations["nodes.1"] == ("nodes.tcl", 1)


def test_user_output_does_not_disturb_the_document(run) -> None:
    t = run('puts "hello"\nputs stdout "x"\nputs -nonewline "y"\nset n [$ns node]')
    assert t.errors == [] and [n.name for n in t.document.nodes] == ["n"]


def test_exit_ends_the_script_quietly(run) -> None:
    t = run("set n [$ns node]\nexit 0\nset m [$ns node]")
    assert t.errors == [] and [n.name for n in t.document.nodes] == ["n"]


def test_non_ascii_and_control_characters_survive(run) -> None:
    t = run('set n [$ns node]\ntb-set-node-startcmd $n "echo \\"é ✓ 😀\\" \\\\ \\t\\x01"')
    assert t.errors == []
    assert t.document.nodes[0].startcmd == 'echo "é ✓ 😀" \\ \t\x01'


def test_argv_is_that_of_a_script_run_without_arguments(run) -> None:
    t = run(
        "if {$argc > 0} { set q [lindex $argv 0] } else { set q DropTail }\nset a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b 1Mb 1ms $q\nputs [file tail $argv0]"
    )
    assert t.errors == [] and t.document.links[0].queue.type == "droptail"
