"""Benchmark: validate's Gilbert-Elliott rows, again and again, with linkd's own count.

``nestbed validate`` measures each Gilbert-Elliott row once (200 000 frames): the loss rate and
mean burst length the receiver saw. One row far from its setting can be a far draw of the model
or frames lost somewhere else. This bench runs the rows ``--runs`` times through one experiment
and prints, for each, the measured rate and burst length beside the frames linkd itself dropped
by its loss model (its counters, before and after): equal counts say every frame the receiver
missed was the model's. Then the mean and range of each row. Needs root.

    .venv/bin/python bench/gilbert.py [--runs N] [--only-rate PCT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from nestbed.lifecycle import signals
from nestbed.studies.validate import Bench, Settings, measure_gilbert

RUNS = 8


def model_drops(counters: dict) -> int:
    """Frames linkd's loss models dropped so far, every port and direction of the link."""
    ports = counters["links"]["link0"]["ports"].values()
    return sum(p[d]["counters"]["drops"]["loss"] for p in ports for d in ("egress", "ingress"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--only-rate", type=float, help="only the row of this loss rate, %%")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/gilbert.py needs root (namespaces)")
    # SIGTERM and SIGHUP stop it as Ctrl-C does: the experiment is swapped out on the way.
    signals.install()
    rows = Settings().gilbert
    if args.only_rate is not None:
        rows = tuple(r for r in rows if abs(r[0] * 100 - args.only_rate) < 1e-9)
        if not rows:
            sys.exit(f"validate has no Gilbert-Elliott row of {args.only_rate:g} %")
    print(f"{args.runs} runs, load {os.getloadavg()[0]:.2f}")
    print(f"{'rate %':>7}{'burst':>6}{'measured %':>12}{'burst':>8}{'missed':>8}"
          f"{'linkd drops':>13}")  # fmt: skip
    found: dict[tuple[float, float], list[float]] = {r: [] for r in rows}
    with tempfile.TemporaryDirectory(prefix="nestbed-bench-gilbert-") as tmp, \
            Bench(Path(tmp), name=f"bench-ge-{os.getpid()}") as bench:  # fmt: skip
        for _ in range(args.runs):
            for rate, burst in rows:
                before = model_drops(bench.counters())
                (row,) = measure_gilbert(bench, Settings(gilbert=((rate, burst),)), lambda _: None)
                dropped = model_drops(bench.counters()) - before
                missed = round(row["measured_loss_rate"] * row["packets"])
                found[(rate, burst)].append(row["measured_loss_rate"] * 100)
                print(f"{rate * 100:>7g}{burst:>6g}{row['measured_loss_rate'] * 100:>12.3f}"
                      f"{row['measured_burst_length']:>8.2f}{missed:>8}{dropped:>13}",
                      flush=True)  # fmt: skip
    print(f"\nload {os.getloadavg()[0]:.2f}")
    for (rate, burst), measured in found.items():
        print(f"{rate * 100:g} % in bursts of {burst:g}: mean {statistics.mean(measured):.3f} %, "
              f"range {min(measured):.3f}-{max(measured):.3f} %")  # fmt: skip


if __name__ == "__main__":
    main()
