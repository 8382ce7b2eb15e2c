"""Benchmark: the mapper (issue 20) on trees, rings and LANs of 10-400 nodes at 100 Mb/s, on
testbeds of 1, 2 and 8 switches with 1 Gb/s and 10 Gb/s trunks, against a hand placement
(by subtree, ring segment, member order); then its time and memory for 400 nodes on 512 hosts
and 10 000 nodes on 1 000 hosts.

Hosts for trees and rings hold 4 nodes and have one 1 Gb/s interface; hosts for LANs are
Emulab's PCs, one node and one 100 Mb/s interface each (a host with one 100 Mb/s interface
cannot carry a tree node's three 100 Mb/s links, so trees and rings need the larger hosts).
Beyond two switches, every switch hangs from a core switch by one trunk.

    PYTHONPATH=src .venv/bin/python bench/mapper.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from nestbed.errors import UserError
from nestbed.mapper import evaluate, map_topology
from nestbed.mapper import generate as g

MB = g.MB
SIZES = (10, 40, 100, 200, 400)
TESTBEDS = {
    "1x64": dict(switches=1, hosts_per_switch=64),
    "2x40 1G": dict(switches=2, hosts_per_switch=40, trunk_bps=1000 * MB),
    "8x64 1G": dict(switches=8, hosts_per_switch=64, trunk_bps=1000 * MB),
    "8x64 10G": dict(switches=8, hosts_per_switch=64, trunk_bps=10_000 * MB),
}
FAMILIES = {"tree": g.tree, "ring": g.ring, "lan": g.lan}
SMALL_HOST = dict(slots=4, nic_bps=1000 * MB)  # trees and rings
PC = dict(slots=1, nic_bps=100 * MB)  # LANs


def bed_for(family: str, name: str):  # type: ignore[no-untyped-def]
    return g.testbed(**TESTBEDS[name], **(PC if family == "lan" else SMALL_HOST))


def run_one(family: str, n: int, bed_name: str, runs: int) -> dict:
    topology, bed = FAMILIES[family](n), bed_for(family, bed_name)
    hand = g.hand_placement(topology, bed) if n <= sum(h.types["pc"] for h in bed.hosts) else None
    reference = evaluate(topology, bed, hand, g.best_homes(topology, bed, hand)) if hand else None
    row: dict = {
        "family": family,
        "n": n,
        "testbed": bed_name,
        "hand": "valid" if reference and reference.valid else "invalid" if reference else "-",
        "hand_trunk": reference.cost.trunk_crossings if reference else None,
    }
    times, answers = [], []
    for _ in range(runs):
        start = time.perf_counter()
        try:
            mapping = map_topology(topology, bed, seed=0)
            answers.append(json.dumps(mapping.to_dict(), sort_keys=True))
            outcome: object = mapping
        except UserError as exc:
            answers.append(str(exc))
            outcome = exc
        times.append(time.perf_counter() - start)
    row["time_s"] = statistics.median(times)
    row["deterministic"] = len(set(answers)) == 1
    if isinstance(outcome, UserError):
        row["mapper"] = "refused"
        row["reason"] = str(outcome)
        return row
    check = evaluate(topology, bed, outcome.hosts, {k: v for k, v in outcome.homes.items() if v})
    row["mapper"] = "valid" if check.valid else "INVALID"
    row["trunk"] = outcome.cost.trunk_crossings
    row["hosts"] = outcome.cost.hosts_used
    return row


PROBE = """
import json, resource, sys, time, tracemalloc
from nestbed.mapper import generate as g, map_topology
family, n, switches, per, slots, nic, trunk, what = sys.argv[1:9]
topology = getattr(g, family)(int(n))
bed = g.testbed(int(switches), int(per), slots=int(slots), nic_bps=int(nic), trunk_bps=int(trunk))
result = {}
if what == "time":
    start = time.perf_counter()
    mapping = map_topology(topology, bed, seed=0)
    result = {"time_s": time.perf_counter() - start, "trunk": mapping.cost.trunk_crossings,
              "hosts": mapping.cost.hosts_used}
elif what == "trace":
    tracemalloc.start()
    map_topology(topology, bed, seed=0)
    result = {"traced_peak_mb": tracemalloc.get_traced_memory()[1] / 1e6}
elif what == "map":
    map_topology(topology, bed, seed=0)
result["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
print(json.dumps(result))
"""


def _probe(what: str, *args: object) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *(str(a) for a in args), what],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def probe(family: str, n: int, switches: int, per: int, *rest: int, runs: int) -> dict:
    """Time (median of ``runs`` fresh processes), the peak of what the mapping allocates
    (tracemalloc), and the peak RSS of a process that maps against one that only builds the
    problem (both with the same imports)."""
    args = (family, n, switches, per, *rest)
    times = [_probe("time", *args) for _ in range(runs)]
    mapped = _probe("map", *args)["maxrss_mb"]
    baseline = _probe("none", *args)["maxrss_mb"]
    return {
        "time_s": statistics.median(t["time_s"] for t in times),
        "traced_peak_mb": _probe("trace", *args)["traced_peak_mb"],
        "rss_mb": mapped,
        "rss_growth_mb": mapped - baseline,
        "trunk": times[0]["trunk"],
        "hosts": times[0]["hosts"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        "| family | nodes | testbed | hand | hand trunk crossings | mapper | trunk crossings "
        "| vs hand | hosts | time (s) | same answer |"
    )
    print("|---|---:|---|---|---:|---|---:|---:|---:|---:|---|")
    rows = []
    for family in FAMILIES:
        for bed_name in TESTBEDS:
            for n in SIZES:
                row = run_one(family, n, bed_name, args.runs)
                rows.append(row)
                ratio = ""
                if (
                    row.get("trunk") is not None
                    and row["hand_trunk"] is not None
                    and row["hand"] == "valid"
                ):
                    ratio = (
                        "="
                        if row["trunk"] == row["hand_trunk"]
                        else (
                            f"{row['trunk'] / row['hand_trunk']:.2f}×" if row["hand_trunk"] else "∞"
                        )
                    )
                print(
                    f"| {family} | {n} | {bed_name} | {row['hand']} | "
                    f"{'' if row['hand_trunk'] is None else row['hand_trunk']} | {row['mapper']} | "
                    f"{row.get('trunk', '')} | {ratio} | {row.get('hosts', '')} | "
                    f"{row['time_s']:.3f} | {'yes' if row['deterministic'] else 'NO'} |",
                    flush=True,
                )
    refused = [r for r in rows if r["mapper"] == "refused"]
    print("\nRefusals (one sentence each):")
    for r in refused:
        print(f"- {r['family']} {r['n']} on {r['testbed']} (hand {r['hand']}): {r['reason']}")
    feasible = [r for r in rows if r["hand"] == "valid"]
    mapped = [r for r in feasible if r["mapper"] == "valid"]
    within = [r for r in mapped if r["trunk"] <= 1.2 * r["hand_trunk"]]
    print(
        f"\nproblems a hand placement proves feasible: {len(feasible)}; mapped validly: "
        f"{len(mapped)}; trunk crossings within 20 % of the hand placement: {len(within)}; "
        f"invalid mappings returned: {sum(r['mapper'] == 'INVALID' for r in rows)}"
    )
    print(
        "\n| problem | testbed | time (s, median) | traced peak (MB) | process peak RSS (MB) "
        "| RSS the mapping adds (MB) | trunk crossings | hosts |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    big = [
        ("tree", 400, 8, 64, 4, 1000 * MB, 1000 * MB, "8x64 hosts ×4, 1G"),
        ("ring", 400, 8, 64, 4, 1000 * MB, 1000 * MB, "8x64 hosts ×4, 1G"),
        ("lan", 400, 8, 64, 1, 100 * MB, 10_000 * MB, "8x64 PCs, 10G"),
        ("tree", 10_000, 8, 125, 16, 1000 * MB, 10_000 * MB, "8x125 hosts ×16, 10G"),
        ("ring", 10_000, 8, 125, 16, 1000 * MB, 10_000 * MB, "8x125 hosts ×16, 10G"),
    ]
    for family, n, switches, per, slots, nic, trunk, label in big:
        r = probe(family, n, switches, per, slots, nic, trunk, runs=args.runs)
        print(
            f"| {family} {n} | {label} | {r['time_s']:.2f} | {r['traced_peak_mb']:.1f} | "
            f"{r['rss_mb']:.0f} | {r['rss_growth_mb']:.1f} | {r['trunk']} | {r['hosts']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
