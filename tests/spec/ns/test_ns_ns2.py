"""The corpus and examples run unchanged in real ns-2 with the stub tb_compat.tcl beside them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ns_helpers import CORPUS, require_ns

from nestbed.spec.ns import STUB

NS2_FILES = sorted(CORPUS.glob("*.ns"))


@pytest.mark.parametrize("path", NS2_FILES, ids=lambda p: p.name)
def test_runs_in_ns2_with_the_stub(path: Path, tmp_path: Path) -> None:
    require_ns()
    shutil.copy(path, tmp_path / path.name)
    shutil.copy(STUB, tmp_path / "tb_compat.tcl")
    done = subprocess.run(
        ["ns", path.name], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "invalid command" not in done.stderr


def test_link_events_act_in_ns2(tmp_path: Path) -> None:
    """`$link down` really stops traffic in ns-2, and `up` restores it."""
    require_ns()
    shutil.copy(STUB, tmp_path / "tb_compat.tcl")
    (tmp_path / "t.ns").write_text(
        """source tb_compat.tcl
set ns [new Simulator]
set a [$ns node]
set b [$ns node]
set l [$ns duplex-link $a $b 10Mb 1ms DropTail]
set u [new Agent/UDP]
$ns attach-agent $a $u
set s [new Agent/LossMonitor]
$ns attach-agent $b $s
$ns connect $u $s
set c [new Application/Traffic/CBR]
$c set interval_ 0.01
$c attach-agent $u
proc count {} { global s ns; puts "[$ns now] [$s set npkts_]" }
$ns at 0 "$c start"
$ns at 1 "count; $l down"
$ns at 2 "count; $l up"
$ns at 3 "count; $l bandwidth 1Mb; $l delay 5ms; $l plr 0.5"
$ns at 4 "count; $ns halt"
$ns run
"""
    )
    done = subprocess.run(
        ["ns", "t.ns"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    counts = [int(line.split()[1]) for line in done.stdout.split("\n") if line.strip()]
    assert counts[1] - counts[0] <= 1  # down: nothing arrives
    assert counts[2] - counts[1] > 80  # up again
    assert 20 < counts[3] - counts[2] < 80  # half lost
