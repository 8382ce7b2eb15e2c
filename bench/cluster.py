"""Benchmark (issue 21): experiments over several hosts.

1. Control traffic, without root: a swap-in sends each host one share of the plan (its nodes,
   its cut links' tunnels) through Dask; how large the shares of binary trees of shaped links
   are, pickled as Dask sends them, and how long the controlling machine takes to plan, place
   and cut them.
2. As root: binary trees swapped in and out through ClusterBackend on hosts simulated on this
   machine as the cluster tests make them (tests/cluster/simulated.py: a namespace per host on
   an underlay shaped by nestbed-linkd, a `nestbed agent` inside each); the plan is computed
   before the clock starts. All the simulated hosts share this machine's cores.

Medians of RUNS runs.

    PYTHONPATH=src python bench/cluster.py          # part 2 needs root
"""

from __future__ import annotations

import os
import pickle
import statistics
import sys
import time
from pathlib import Path

from nestbed.backend.cluster.placement import HostFacts, place
from nestbed.backend.cluster.share import Underlay, shares
from nestbed.backend.plan import plan
from nestbed.spec import yaml as yaml_front_end
from nestbed.spec.resolve import resolve

RUNS = 3
CASES = ((100, 4), (400, 4), (1000, 10))  # (nodes, hosts)
SWAPS = ((100, 4), (400, 4))  # (nodes, simulated hosts); the goal: 400 on 4,
GOAL_IN_S, GOAL_OUT_S = 6.0, 3.0  # swapped in within 6 s and out within 3 s


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


def control_traffic() -> None:
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


def swaps() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from simulated import Agents, Machines  # the cluster tests' simulated hosts

    from nbtest import until
    from nestbed.backend.cluster.backend import ClusterBackend

    print("\n| nodes | simulated hosts | swap-in (s) | goal | swap-out (s) | goal |")
    print("|---|---|---|---|---|---|")
    for n, count in SWAPS:
        p = plan(tree(n))
        machines = Machines(count)
        agents = None
        try:
            machines.start()
            agents = Agents(machines, slots=-(-n // count))
            for host in machines.hosts:
                agents.start(host)
            with ClusterBackend(agents.address, state_root=machines.run_dir("bench")) as cluster:
                until(lambda c=cluster, m=machines: c.hosts() == m.hosts, "the agents to join")
                ins, outs = [], []
                for _ in range(RUNS):
                    start = time.perf_counter()
                    cluster.swap_in(p)
                    ins.append(time.perf_counter() - start)
                    ping = cluster.exec_in(p, "n0", ["ping", "-c", "1", "-W", "5", f"n{n - 1}"],
                                           capture_output=True, text=True)  # fmt: skip
                    start = time.perf_counter()
                    cluster.swap_out(p)
                    outs.append(time.perf_counter() - start)
                    if ping.returncode != 0:
                        raise SystemExit(f"n0 does not reach n{n - 1}: {ping.stdout}")
        finally:
            if agents is not None:
                agents.stop()
            machines.stop()
        print(f"| {n} | {count} | {statistics.median(ins):.2f} | {GOAL_IN_S:g} "
              f"| {statistics.median(outs):.2f} | {GOAL_OUT_S:g} |")  # fmt: skip


def main() -> None:
    control_traffic()
    if os.geteuid() == 0:
        swaps()
    else:
        print("\n(swap-in on simulated hosts skipped: it needs root)")


if __name__ == "__main__":
    main()
