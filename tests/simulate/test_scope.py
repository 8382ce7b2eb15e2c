"""What a simulation covers: events as they happen in ns-2, and what it leaves out."""

from __future__ import annotations

from pathlib import Path

from nestbed.api import Experiment
from nestbed.simulate.scope import event_rows, not_simulated, planned_events
from nestbed.spec import load


def experiment() -> Experiment:
    exp = Experiment("s")
    a, b = exp.node("a", os="FBSD45-STD"), exp.node("b")
    exp.link(a, b, name="l", bandwidth="10Mb", delay="5ms", jitter="1ms")
    exp.agent("u", "udp", a)
    exp.agent("n", "null", b)
    exp.connect("u", "n")
    exp.application("c0", "cbr", "u")
    exp.program("p", b, "sleep 1")
    exp.at(1, "c0", "start")
    exp.at(2, "p", "start")
    exp.at(9, "c0", "stop")
    return exp


def test_events_after_the_end_are_skipped_and_programs_not_simulated() -> None:
    rows = event_rows(experiment().build(), end_s=5)
    assert [(r["object"], r["verb"], r["outcome"]) for r in rows] == [
        ("c0", "start", "ok"),
        ("p", "start", "not simulated"),
        ("c0", "stop", "skipped"),
    ]
    assert rows[0]["actual_s"] == 1 and rows[0]["error_ms"] == 0
    assert rows[2]["actual_s"] is None


def test_everything_left_out_is_named() -> None:
    missing = not_simulated(experiment().build())
    assert missing == [
        "node a: os FBSD45-STD (an ns-2 node is not a machine)",
        "program p on b: `sleep 1` (programs cannot run in ns-2)",
        "link l, a egress: jitter 1ms (uniform)",
        "link l, b egress: jitter 1ms (uniform)",
        "event p start: programs cannot run in a simulator",
    ]


def test_timeline_events_happen_relative_to_its_start(tmp_path: Path) -> None:
    file = tmp_path / "t.ns"
    file.write_text(
        """set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set l [$ns duplex-link $a $b 10Mb 5ms DropTail]
set tl [$ns event-timeline]
$tl at 0.5 "$l down"
$tl at 1.5 "$l up"
$ns at 3 "$tl start"
$ns at 4.2 "$l delay 1ms"
$ns run
"""
    )
    planned = planned_events(load(file).experiment)
    assert [(p.time_s, p.source, p.object, p.verb) for p in planned] == [
        (3.0, "static", "tl", "start"),
        (3.5, "timeline", "l", "down"),
        (4.2, "static", "l", "delay"),
        (4.5, "timeline", "l", "up"),
    ]
