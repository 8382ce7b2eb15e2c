"""Benchmark: swap-in and swap-out time of the 100-node tree, every link shaped by linkd,
and of a 100-node linear chain, median of 3 runs. Needs root."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

from nestbed.api import Experiment
from nestbed.backend import linux
from nestbed.backend.plan import plan
from nestbed.spec import load

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUNS = 3


def linear(n: int):  # type: ignore[no-untyped-def]
    exp = Experiment(f"linear{n}")
    nodes = [exp.node(f"n{i}") for i in range(n)]
    for a, b in itertools.pairwise(nodes):
        exp.link(a, b, bandwidth="100Mb", delay="1ms")
    exp.routing("static")
    return exp.build()


def timed(p) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    linux.swap_in(p)
    middle = time.perf_counter()
    linux.swap_out(p)
    return middle - start, time.perf_counter() - middle


def main() -> None:
    cases = {
        "tree, 100 nodes, 99 shaped links": load(EXAMPLES / "tree.ns").experiment,
        "linear, 100 nodes, 99 shaped links": linear(100),
    }
    print(f"swap-in / swap-out, median of {RUNS} runs")
    print(f"{'experiment':<38}{'in s':>8}{'out s':>8}{'per node ms':>13}")
    for label, exp in cases.items():
        p = plan(exp)
        times = [timed(p) for _ in range(RUNS)]
        t_in = statistics.median(t for t, _ in times)
        t_out = statistics.median(t for _, t in times)
        print(f"{label:<38}{t_in:>8.2f}{t_out:>8.2f}{t_in / len(exp.nodes) * 1000:>13.1f}")


if __name__ == "__main__":
    main()
