"""Benchmark: how long the front ends take to turn the examples into IR (median of 7 runs).

Printed as a table; the figures go into docs/benchmarks.md. The ns-2 front end runs `tclsh`, so
its time includes starting the interpreter; "tclsh start" is measured in the same run as the
baseline that cost is compared with. Besides wall-clock time, the CPU time used (this process
and its tclsh children, user + system) is printed: on a machine shared with other work it varies
far less than wall-clock time.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from pathlib import Path

from nestbed.spec import load

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUNS = 7


def cpu_seconds() -> float:
    """User and system time of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def median_seconds(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median wall-clock and CPU seconds of RUNS calls of FN."""
    wall, cpu = [], []
    for _ in range(RUNS):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(cpu_seconds() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    baseline, baseline_cpu = median_seconds(
        lambda: subprocess.run(["tclsh"], input="exit\n", text=True, check=True)
    )
    print(f"front-end parse time, median of {RUNS} runs")
    print(f"{'file':<22}{'nodes':>7}{'links':>7}{'ms':>10}{'× tclsh start':>16}{'cpu ms':>10}")
    print(
        f"{'(tclsh start)':<22}{'':>7}{'':>7}{baseline * 1000:>10.1f}{1.0:>16.1f}"
        f"{baseline_cpu * 1000:>10.1f}"
    )
    for path in sorted(EXAMPLES.glob("*.ns")) + sorted(EXAMPLES.glob("*.yaml")):
        exp = load(path).experiment
        seconds, cpu = median_seconds(lambda p=path: load(p))
        links = len(exp.links) + len(exp.lans)
        print(
            f"{path.name:<22}{len(exp.nodes):>7}{links:>7}"
            f"{seconds * 1000:>10.1f}{seconds / baseline:>16.1f}{cpu * 1000:>10.1f}"
        )


if __name__ == "__main__":
    main()
