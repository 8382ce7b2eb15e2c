"""Benchmark: a sweep's overhead per point beyond the run's own time, for a 4-node experiment,
as whole runs and in the link-reuse mode (issue 9's targets: <= 1 s, and reuse >= 5x faster).
Median over the points of one sweep of each kind (the first point, which warms up, excluded).
Needs root."""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from nestbed.sweep import execute
from nestbed.sweep.spec import from_flags

POINTS = 8
EXPERIMENT = """\
set ns [new Simulator]
source tb_compat.tcl
$ns rtproto Static
$ns define-template-parameter bw 10Mb
set a [$ns node]
set b [$ns node]
set c [$ns node]
set d [$ns node]
$ns duplex-link $a $b $bw 5ms DropTail
$ns duplex-link $b $c $bw 5ms DropTail
$ns duplex-link $c $d $bw 5ms DropTail
set work [$a program-agent -command "sleep 0.5"]
$ns at 0.1 "$work start"
$ns run
"""


def overheads(folder: Path, reuse: bool) -> list[float]:
    file = folder / "four.ns"
    file.write_text(EXPERIMENT)
    rates = ",".join(f"{10 + i}Mb" for i in range(POINTS))
    sweep = from_flags(file, [f"bw={rates}"], [], reuse_links=reuse)
    rows = execute.run_sweep(sweep, folder / ("reuse" if reuse else "whole"))
    found = []
    for row in sorted(rows, key=lambda r: r["point"])[1:]:
        manifest = json.loads((Path(row["results"]) / "manifest.json").read_text())
        found.append(row["seconds"] - manifest["duration_s"])
    return found


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        whole = statistics.median(overheads(Path(tmp), reuse=False))
        reused = statistics.median(overheads(Path(tmp), reuse=True))
    print(f"sweep overhead per point beyond the run, 4-node experiment, median of {POINTS - 1}")
    print(f"{'mode':<22}{'overhead s':>12}")
    print(f"{'whole runs':<22}{whole:>12.3f}")
    print(f"{'link-reuse':<22}{reused:>12.3f}")
    print(f"link-reuse is {whole / reused:.1f}x faster per point")


if __name__ == "__main__":
    main()
