"""SIGTERM, SIGHUP and SIGINT to a real `nestbed run` or `nestbed sweep`: the command stops,
keeps what it measured, writes the manifest with the signal's name, swaps out and leaves
nothing on the machine; a sweep stopped in a point runs that point again next time."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from machine import DEADLINE_S, left, manifest, nestbed, state, until

pytestmark = pytest.mark.root

# Two nodes over a shaped link with CBR between them; it would run for 60 s.
LONG = """\
set ns [new Simulator]
source tb_compat.tcl
$ns rtproto Static
$ns define-template-parameter bw 10Mb "bandwidth"
set a [$ns node]
set b [$ns node]
set link0 [$ns duplex-link $a $b $bw 5ms DropTail]
set udp0 [new Agent/UDP]
$ns attach-agent $a $udp0
set null0 [new Agent/Null]
$ns attach-agent $b $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 attach-agent $udp0
$cbr0 set rate_ 1Mb
$ns at 0.1 "$cbr0 start"
$ns at HALT "$ns halt"
$ns run
"""


def experiment_file(tmp_path: Path, name: str, halt_s: float = 60) -> Path:
    path = tmp_path / f"{name}.ns"
    path.write_text(LONG.replace("HALT", str(halt_s)))
    return path


def measuring(folder: Path) -> bool:
    """The run has begun and its sampler has written counters (something was measured)."""
    counters = folder / "links" / "counters.csv"
    return (
        manifest(folder).get("outcome") == "running"
        and counters.exists()
        and (len(counters.read_text().splitlines()) > 1)
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=str)
def test_a_signal_stops_a_run_keeps_its_measures_and_leaves_nothing(tmp_path: Path, signum):
    name = f"s17sig{signum.name[3:].lower()}{os.getpid()}"
    db, results = tmp_path / "store.db", tmp_path / "results"
    process = nestbed(db, "run", str(experiment_file(tmp_path, name)), "--results", str(results))
    try:
        until(lambda: state(db, name) == "active" and measuring(results), "the run to measure")
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signum, stderr
    ended = manifest(results)
    assert ended["outcome"] == f"interrupted ({signum.name})"
    assert ended["duration_s"] > 0
    assert len((results / "links" / "counters.csv").read_text().splitlines()) > 1
    assert state(db, name) == "swapped"
    assert left(name) == []


def test_a_second_signal_does_not_cut_the_swap_out_short(tmp_path: Path):
    name = f"s17sigtwice{os.getpid()}"
    db, results = tmp_path / "store.db", tmp_path / "results"
    process = nestbed(db, "run", str(experiment_file(tmp_path, name)), "--results", str(results))
    try:
        until(lambda: state(db, name) == "active" and measuring(results), "the run to measure")
        process.send_signal(signal.SIGTERM)
        # The second signal arrives while the experiment is being swapped out.
        until(lambda: state(db, name) != "active", "the swap-out to begin")
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    assert manifest(results)["outcome"] == "interrupted (SIGTERM)"
    assert state(db, name) == "swapped"
    assert left(name) == []


def test_a_sweep_stopped_in_a_point_swaps_it_out_and_runs_it_again_next_time(tmp_path: Path):
    sweep = f"s17sweep{os.getpid()}"
    file = experiment_file(tmp_path, sweep, halt_s=4)
    folder = tmp_path / "sweep"
    argv = ["sweep", str(file), "--grid", "bw=10Mb,20Mb", "--results", str(folder)]
    first = folder / "runs"
    process = nestbed(tmp_path / "unused.db", *argv)
    try:
        point = until(lambda: next((p for p in first.glob("*") if measuring(p)), None),
                      "a point to measure")  # fmt: skip
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert manifest(point)["outcome"] == "interrupted (SIGTERM)"
    recorded = folder / "points.jsonl"
    rows = [json.loads(x) for x in recorded.read_text().splitlines()] if recorded.exists() else []
    assert point.name not in {r["point"] for r in rows}  # not recorded: it runs again
    assert left(f"{sweep}-{point.name}") == []
    again = nestbed(tmp_path / "unused.db", *argv)
    _, stderr = again.communicate(timeout=DEADLINE_S)
    assert again.returncode == 0, stderr
    rows = [json.loads(x) for x in recorded.read_text().splitlines()]
    assert {r["point"]: r["outcome"] for r in rows}[point.name] == "halted"
    assert manifest(point)["outcome"] == "halted"
