"""Every error and warning of the ns front end: exact text and file:line."""

from __future__ import annotations

import pytest
from ns_helpers import line

from nestbed.errors import Problem

N2 = "set n0 [$ns node]\nset n1 [$ns node]\n"
LINK = N2 + "set link0 [$ns duplex-link $n0 $n1 10Mb 20ms DropTail]\n"
LAN = N2 + 'set lan0 [$ns make-lan "$n0 $n1" 10Mb 20ms]\n'
OBJECTS = "nodes, links, LANs, queues, agents, applications, programs, timelines, sequences, groups or $ns"
CLASSES = (
    "Simulator, Agent/UDP, Agent/TCP, Agent/TCP/Reno, Agent/TCP/Newreno, Agent/TCP/Sack1, "
    "Agent/TCP/Vegas, Agent/TCP/Fack, Agent/TCP/FullTcp, Agent/TCP/FullTcp/Sack, Agent/Null, "
    "Agent/TCPSink, Agent/TCPSink/DelAck, Agent/TCPSink/Sack1, "
    "Agent/LossMonitor, Application/Traffic/CBR, Application/FTP, Program, EventGroup"
)

ERRORS = [
    (
        "set n_0 [$ns node]",
        1,
        "node name 'n_0' (from variable n_0) is not valid: names may contain only letters, digits and '-'; rename the variable",
    ),
    (
        N2 + "set l.x [$ns duplex-link $n0 $n1 1Mb 1ms DropTail]",
        3,
        "link name 'l.x' (from variable l.x) is not valid: names may contain only letters, digits and '-'; rename the variable",
    ),
    (
        N2 + 'set my_lan [$ns make-lan "$n0 $n1" 1Mb 1ms]',
        3,
        "LAN name 'my_lan' (from variable my_lan) is not valid: names may contain only letters, digits and '-'; rename the variable",
    ),
    (
        "set a [$ns node]\nset a [$ns node]",
        2,
        "node name 'a' (from variable a) is already used by the node created at line 3; use a different variable for each object",
    ),
    (
        N2 + "$ns duplex-link $n0 $n0 1Mb 1ms DropTail",
        3,
        "duplex-link joins node n0 to itself; a link joins two different nodes",
    ),
    (
        N2 + "$ns duplex-link $n0 $n1 1Mb 1ms",
        3,
        "wrong arguments: use `$ns duplex-link NODE1 NODE2 BANDWIDTH DELAY DropTail|RED|GRED`",
    ),
    (N2 + "$ns duplex-link $n0 foo 1Mb 1ms DropTail", 3, "duplex-link: 'foo' is not a node"),
    (
        N2 + "$ns link $n0 $n1",
        3,
        "$ns link: there is no link between node n0 and node n1; create one with `$ns duplex-link`",
    ),
    (
        LINK
        + "set n2 [$ns node]\n$ns duplex-link $n0 $n2 1Mb 1ms DropTail\ntb-set-ip $n0 10.0.0.1",
        6,
        "tb-set-ip: node n0 has 2 links or LANs so far, not one; use tb-set-ip-link, tb-set-ip-lan or tb-set-ip-interface",
    ),
    (
        "set n [$ns node]\ntb-set-ip $n 10.0.0.1",
        2,
        "tb-set-ip: node n has 0 links or LANs so far, not one; use tb-set-ip-link, tb-set-ip-lan or tb-set-ip-interface",
    ),
    (
        LINK + "set n2 [$ns node]\ntb-set-ip-link $n2 $link0 10.0.0.1",
        5,
        "tb-set-ip-link: node n2 is not a member of link link0",
    ),
    (LINK + "tb-set-ip-lan $n0 $link0 10.0.0.1", 4, "tb-set-ip-lan: link link0 is not a lan"),
    (LAN + "tb-set-lan-loss $n0 0.1", 4, "tb-set-lan-loss: node n0 is not a lan"),
    (
        LINK + "tb-set-node-lan-delay $n0 $link0 1ms",
        4,
        "tb-set-node-lan-delay: link link0 is not a lan",
    ),
    (
        "frobnicate 1 2",
        1,
        "unknown command 'frobnicate'; it is not a Tcl, ns-2 or Emulab command that nestbed knows (check its spelling)",
    ),
    (
        '$ns at 5.0 "finish"',
        1,
        "event at 5.0: 'finish' is not an object of this experiment nor a procedure of the script; "
        f"events act on {OBJECTS}",
    ),
    (
        "$ns at 5.0 {$nothere down}",
        1,
        f"event at 5.0: '$nothere' is not an object of this experiment; events act on {OBJECTS}",
    ),
    (
        'set tl [$ns event-timeline]\n$tl at 2 "stop"',
        2,
        f"timeline tl: event at 2: 'stop' is not an object of this experiment; events act on {OBJECTS}",
    ),
    (
        "set s [$ns event-sequence {oops run}]",
        1,
        f"sequence s: step: 'oops' is not an object of this experiment; events act on {OBJECTS}",
    ),
    (
        "set g [$ns event-group {x}]",
        1,
        "group g: 'x' is not an object of this experiment; a group holds nodes, links, LANs, agents, applications or programs",
    ),
    (
        "set u [new Agent/UDP]",
        1,
        "agent u has no node; attach it with `$ns attach-agent NODE AGENT` or `$prog set node NODE`",
    ),
    (
        "set c [new Application/Traffic/CBR]",
        1,
        "cbr c has no agent; attach it with `$app attach-agent AGENT`",
    ),
    (
        "set p [new Program $ns]\n$p set command ls",
        1,
        "program p has no node; attach it with `$ns attach-agent NODE AGENT` or `$prog set node NODE`",
    ),
    (
        "set n [$ns node]\nset p [new Program $ns]\n$p set node $n",
        2,
        'program p has no command; set it with `$prog set command "..."`',
    ),
    (
        "set n [$ns node]\n$n program-agent -command",
        2,
        "program-agent: options come in pairs; use `$node program-agent -command CMD ?-dir DIR? ?-timeout T? ?-expected-exit-code N?`",
    ),
    # Tcl errors: one entry with file:line, never a stack dump
    ("set x $undefined", 1, 'can\'t read "undefined": no such variable'),
    (
        "for {set i 0} {$i < 2} {incr i} {\n  set n($i) [$ns node]\n  expr {1/0}\n}",
        3,
        "divide by zero",
    ),
    ("proc p {} {\n  set a 1\n  error boom\n}\n\np", 3, "boom"),
    ('set a "unclosed', 1, 'missing "'),
]


@pytest.mark.parametrize(("body", "body_line", "message"), ERRORS)
def test_error(run, body: str, body_line: int, message: str) -> None:
    t = run(body)
    assert Problem(message, "t.ns", line(body_line)) in t.errors, t.errors


WARNINGS = [
    ("$ns frob", 1, "unknown method 'frob' of $ns; ignored"),
    (LINK + "$link0 frob 1", 4, "unknown method 'frob' of link link0; ignored"),
    (LAN + "$lan0 frob", 4, "unknown method 'frob' of LAN lan0; ignored"),
    ("set n [$ns node]\n$n frob", 2, "unknown method 'frob' of node n; ignored"),
    (
        "$ns trace-all [open out.tr w]",
        1,
        "ns-2 command 'trace-all' of $ns has no effect here; ignored",
    ),
    ("$ns namtrace-all x", 1, "ns-2 command 'namtrace-all' of $ns has no effect here; ignored"),
    ("$ns color 1 Blue", 1, "ns-2 command 'color' of $ns has no effect here; ignored"),
    (
        LINK + "$ns duplex-link-op $n0 $n1 orient right",
        4,
        "ns-2 command 'duplex-link-op' of $ns has no effect here; ignored",
    ),
    ("$ns flush-trace", 1, "ns-2 command 'flush-trace' of $ns has no effect here; ignored"),
    (
        "$ns use-scheduler Heap",
        1,
        "ns-2 command 'use-scheduler' of $ns has no effect here; ignored",
    ),
    (
        "set n [$ns node]\n$n color red",
        2,
        "ns-2 command 'color' of node n has no effect here; ignored",
    ),
    (
        "set n [$ns node]\n$n shape box",
        2,
        "ns-2 command 'shape' of node n has no effect here; ignored",
    ),
    (
        "set n [$ns node]\n$n label hi",
        2,
        "ns-2 command 'label' of node n has no effect here; ignored",
    ),
    (
        "$ns halt",
        1,
        "'halt' of $ns is an event and has no effect outside `$ns at`; schedule it with `$ns at TIME \"...\"`",
    ),
    (
        "$ns linktest",
        1,
        "'linktest' of $ns is an event and has no effect outside `$ns at`; schedule it with `$ns at TIME \"...\"`",
    ),
    (
        LINK + "$link0 down",
        4,
        "'down' of link link0 is an event and has no effect outside `$ns at`; schedule it with `$ns at TIME \"...\"`",
    ),
    (
        "$ns rtproto ospf",
        1,
        "rtproto ospf: OSPF is computed as static shortest paths (like Session); routes are not recomputed when links go down",
    ),
    (
        LINK + "[[$ns link $n0 $n1] queue] set blue_ 1",
        4,
        "queue variable 'blue_' of the queue of link link0 from n0 has no effect here; ignored",
    ),
    (
        "set c [new Application/Traffic/CBR]\n$c set burst_ 1",
        2,
        "variable 'burst_' of cbr c has no effect here; ignored",
    ),
    # Emulab's lenience (issue 16): it warns and goes on where these used to be errors
    (
        "tb-set-ip-routing ospf",
        1,
        "tb-set-ip-routing ospf: OSPF is computed as static shortest paths (like Session); routes are not recomputed when links go down",
    ),
    (
        N2 + "$ns duplex-link $n0 $n1 1Mb 1ms FQ",
        3,
        "duplex-link: queue type 'FQ' is not supported; using DropTail, as Emulab does (the supported types are DropTail, RED and GRED)",
    ),
    (
        N2 + '$ns make-lan "$n0 $n1" 1Mb 1ms LL Queue/FQ',
        3,
        "make-lan: queue type 'Queue/FQ' is not supported; using DropTail, as Emulab does (the supported types are DropTail, RED and GRED)",
    ),
    (
        "$ns rtproto DV",
        1,
        "rtproto 'DV' is not supported; ignored, as Emulab does (routing stays as set; use Static, Session, ospf or Manual)",
    ),
    (
        "set x [new Agent/SCTP]",
        1,
        f"class 'Agent/SCTP' is not supported; its object does nothing here, as in Emulab (supported classes are {CLASSES})",
    ),
]


@pytest.mark.parametrize(("body", "body_line", "message"), WARNINGS)
def test_warning(run, body: str, body_line: int, message: str) -> None:
    t = run(body)
    assert Problem(message, "t.ns", line(body_line)) in t.warnings, t.warnings


def test_errors_are_gathered_and_parsing_goes_on(run) -> None:
    t = run('foo\nset n_1 [$ns node]\nbar\n$ns at 1 "finish"\nset ok [$ns node]')
    assert [p.line for p in t.errors] == [line(1), line(2), line(3), line(4)]
    assert [n.name for n in t.document.nodes] == ["node0", "ok"]


def test_missing_run_warns(run) -> None:
    t = run("set ns [new Simulator]\nset n [$ns node]\n", raw=True)
    assert t.warnings == [
        Problem("the file never calls `$ns run`; add it at the end (ns-2 needs it)", "t.ns", 1)
    ]


def test_invalid_document_values_become_located_errors(run) -> None:
    t = run(LINK + "nb-set-link-jitter $link0 1ms wobbly")
    assert len(t.errors) == 1
    assert t.errors[0].file == "t.ns" and t.errors[0].line == line(4)
    assert "jitter_distribution" in t.errors[0].message


ELSE_BRANCHES = [
    "if {0} {\n    set a 1\n} else {\n    set c 2\n    set b $nothere\n}",
    "set y 0\nif $y {\n    set a 1\n} else {\n    set c 2\n    set b $nothere\n}",
    "if {0} {\n    set a 1\n} elseif {0} {\n    set q 2\n} else {\n    set b $nothere\n}",
    "$ns make-simulated {\n    if {0} {\n        set a 1\n    } else {\n        set b $nothere\n    }\n}",
    "namespace eval x {\n    if {0} {\n        set a 1\n    } else {\n        set b $nothere\n    }\n}",
    "foreach i {1 2} {\n    if {$i == 1} {\n        set a 1\n    } else {\n        set b $nothere\n    }\n}",
    "proc p {} {\n    if {0} {\n        set a 1\n    } else {\n        set b $nothere\n    }\n}\np",
]


@pytest.mark.parametrize("body", ELSE_BRANCHES)
def test_tcl_error_in_a_later_branch_has_its_own_line(run, body: str) -> None:
    t = run(body)
    want = body.split("\n").index(next(x for x in body.split("\n") if "$nothere" in x)) + 1
    assert [(e.message, e.line) for e in t.errors] == [
        ('can\'t read "nothere": no such variable', line(want))
    ]
