"""Benchmark: how long the front ends take to turn the examples into IR (median of 7 runs).

Printed as a table; the figures go into docs/benchmarks.md. The ns-2 front end runs `tclsh`, so
its time includes starting the interpreter; "tclsh start" is measured in the same run as the
baseline that cost is compared with.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from nestbed.spec import load

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUNS = 7


def median_seconds(fn) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    baseline = median_seconds(
        lambda: subprocess.run(["tclsh"], input="exit\n", text=True, check=True)
    )
    print(f"front-end parse time, median of {RUNS} runs")
    print(f"{'file':<22}{'nodes':>7}{'links':>7}{'ms':>10}{'× tclsh start':>16}")
    print(f"{'(tclsh start)':<22}{'':>7}{'':>7}{baseline * 1000:>10.1f}{1.0:>16.1f}")
    for path in sorted(EXAMPLES.glob("*.ns")) + sorted(EXAMPLES.glob("*.yaml")):
        exp = load(path).experiment
        seconds = median_seconds(lambda p=path: load(p))
        links = len(exp.links) + len(exp.lans)
        print(
            f"{path.name:<22}{len(exp.nodes):>7}{links:>7}"
            f"{seconds * 1000:>10.1f}{seconds / baseline:>16.1f}"
        )


if __name__ == "__main__":
    main()
