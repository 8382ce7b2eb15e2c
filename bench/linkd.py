"""Benchmark: capacity of an unshaped emulated link against a direct veth pair, same run.

Packets per second of 64-byte frames (nestbed-probe, one sender, offered far above what
either path carries) and TCP throughput (iperf3, one stream), each the median of 3 runs,
through nestbed-linkd and through a plain veth pair. Needs root.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from nestbed.backend import linux
from nestbed.studies.validate import Bench

RUNS = 3


def udp_pps(bench: Bench) -> float:
    _, got, _ = bench.probe(
        ["--size", "18", "--pps", "3000000", "--duration", "3"], ["--idle", "2"]
    )
    return got["rate"]["pps"]


def tcp_bps(bench: Bench) -> float:
    linux.exec_in(bench.plan, "r", ["iperf3", "-s", "-1", "-D"], check=True)
    time.sleep(0.3)
    result = linux.exec_in(
        bench.plan, "s", ["iperf3", "-c", bench.receiver_ip, "-t", "4", "-J"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(result.stdout)["end"]["sum_received"]["bits_per_second"]


def main() -> None:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, through in (("direct veth", False), ("nestbed-linkd", True)):
            with Bench(Path(tmp), through_linkd=through, name=f"bench-{int(through)}") as bench:
                pps = statistics.median(udp_pps(bench) for _ in range(RUNS))
                bps = statistics.median(tcp_bps(bench) for _ in range(RUNS))
                counters = bench.counters()["threads"] if through else None
            rows[label] = (pps, bps, counters)
    base_pps, base_bps, _ = rows["direct veth"]
    print(f"link capacity, median of {RUNS} runs (64-byte UDP frames; one TCP stream)")
    print(f"{'path':<16}{'UDP pps':>12}{'× direct':>10}{'TCP Gb/s':>11}{'× direct':>10}")
    for label, (pps, bps, _) in rows.items():
        ratios = f"{pps / base_pps:>10.2f}{bps / 1e9:>11.2f}{bps / base_bps:>10.2f}"
        print(f"{label:<16}{pps:>12,.0f}{ratios}")
    lateness = rows["nestbed-linkd"][2]
    print("linkd timer lateness:", json.dumps([t["lateness"] for t in lateness]))


if __name__ == "__main__":
    main()
