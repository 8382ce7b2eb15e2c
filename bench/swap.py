"""Benchmark: swap-in and swap-out time of the 100-node tree, every link shaped by linkd,
and of 100- and 1000-node linear chains, median of 3 runs: the back end alone, and the whole
swap-in of `nestbed swapin` (store, back end, controller started and answering). Needs root."""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path

from nestbed.api import Experiment
from nestbed.backend import linux
from nestbed.backend.plan import plan
from nestbed.lifecycle import Testbed
from nestbed.model.options import RunOptions
from nestbed.spec import load
from nestbed.store import Store

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


def whole(exp) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp, Store.open(str(Path(tmp) / "s.db")) as store:
        testbed = Testbed(store, linux.LinuxBackend())
        testbed.define(exp)
        start = time.perf_counter()
        testbed.swap_in(exp.name, RunOptions(results=Path(tmp) / "results"))
        middle = time.perf_counter()
        testbed.swap_out(exp.name)
        return middle - start, time.perf_counter() - middle


def main() -> None:
    cases = {
        "tree, 100 nodes, 99 shaped links": load(EXAMPLES / "tree.ns").experiment,
        "linear, 100 nodes, 99 shaped links": linear(100),
        "linear, 1000 nodes, 999 shaped links": linear(1000),
    }
    print(f"swap-in / swap-out, median of {RUNS} runs")
    print(f"{'experiment':<38}{'in s':>8}{'out s':>8}{'per node ms':>13}")
    medians = {}
    for label, exp in cases.items():
        p = plan(exp)
        times = [timed(p) for _ in range(RUNS)]
        t_in = statistics.median(t for t, _ in times)
        t_out = statistics.median(t for _, t in times)
        medians[len(exp.nodes), label.split(",")[0]] = (t_in, t_out)
        print(f"{label:<38}{t_in:>8.2f}{t_out:>8.2f}{t_in / len(exp.nodes) * 1000:>13.1f}")
    (in100, out100), (in1000, out1000) = medians[100, "linear"], medians[1000, "linear"]
    print(
        f"marginal cost per node (linear 100 -> 1000): swap-in {(in1000 - in100) / 0.9:.1f} ms, "
        f"swap-out {(out1000 - out100) / 0.9:.1f} ms"
    )
    print(f"\nwhole swap-in (store, back end, controller) / swap-out, median of {RUNS} runs")
    print(f"{'experiment':<38}{'in s':>8}{'out s':>8}")
    tree = cases["tree, 100 nodes, 99 shaped links"]
    times = [whole(tree) for _ in range(RUNS)]
    t_in = statistics.median(t for t, _ in times)
    t_out = statistics.median(t for _, t in times)
    print(f"{'tree, 100 nodes, 99 shaped links':<38}{t_in:>8.2f}{t_out:>8.2f}")


if __name__ == "__main__":
    main()
