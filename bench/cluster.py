"""Benchmark (first part of issue 21's bench): the control traffic of a swap-in on a cluster.

A swap-in sends each host one share of the plan (its nodes, its cut links' tunnels) through
Dask; this measures, without root and without hosts, how large the shares of binary trees of
shaped links are, pickled as Dask sends them, and how long the controlling machine takes to
plan, place and cut them (medians of RUNS runs). The swap-in itself on simulated hosts (the
issue's 400-node goal) is not measured yet.

    PYTHONPATH=src python bench/cluster.py
"""

from __future__ import annotations

import pickle
import statistics
import time

from nestbed.backend.cluster.placement import HostFacts, place
from nestbed.backend.cluster.share import Underlay, shares
from nestbed.backend.plan import plan
from nestbed.spec import yaml as yaml_front_end
from nestbed.spec.resolve import resolve

RUNS = 3
CASES = ((100, 4), (400, 4), (1000, 10))  # (nodes, hosts)


def tree(n: int):  # type: ignore[no-untyped-def]
    """A binary tree of ``n`` nodes, every link 100 Mb/s and 1 ms (so all go through linkd)."""
    nodes = ", ".join(f"{{name: n{i}}}" for i in range(n))
    links = "\n".join(
        f"  - {{name: l{i}, members: [n{(i - 1) // 2}, n{i}], bandwidth: 100Mb, delay: 1ms}}"
        for i in range(1, n)
    )
    text = f"name: tree{n}\nrouting: static\nnodes: [{nodes}]\nlinks:\n{links}\n"
    document, locations = yaml_front_end.read(text, f"tree{n}.yaml")
    return resolve(document, file=f"tree{n}.yaml", locations=locations)


def main() -> None:
    print("| nodes | hosts | cut links | bytes per share (max) | all shares | "
          "plan + place + cut (s, median) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for n, count in CASES:
        exp = tree(n)
        facts = [
            HostFacts(f"pc{i}", f"10.0.0.{i + 1}", 8, 1 << 34, -(-n // count), 10**10)
            for i in range(count)
        ]
        underlay = Underlay({f.name: f.address for f in facts})
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            p = plan(exp)
            parts = shares(p, place(p, facts), underlay)
            times.append(time.perf_counter() - start)
        sizes = [len(pickle.dumps(part)) for part in parts.values()]
        cut = len({t.link for part in parts.values() for t in part.tunnels})
        print(f"| {n} | {count} | {cut} | {max(sizes) / 1e3:.0f} kB | {sum(sizes) / 1e3:.0f} kB "
              f"| {statistics.median(times):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
