"""nestbed-probe's per-packet logs read back (pure): the receiver's log by burst, the
sender's echo log by receiver."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Delays:
    """Distinct datagrams and their delays (µs) in one burst at one point."""

    packets: int
    mean_us: float | None
    median_us: float | None
    p99_us: float | None

    @classmethod
    def of(cls, packets: int, delays_ns: list[int]) -> Delays:
        if not delays_ns:
            return cls(packets, None, None, None)
        ordered = sorted(delays_ns)
        p99 = ordered[min(len(ordered) - 1, max(0, -(-99 * len(ordered) // 100) - 1))]
        return cls(
            packets,
            statistics.fmean(ordered) / 1e3,
            statistics.median(ordered) / 1e3,
            p99 / 1e3,
        )


def received_by_burst(path: Path) -> dict[int, Delays]:
    """The receiver's log (seq,burst,send_ns,recv_ns,size,delay_ns): per burst id, the
    distinct sequence numbers read and the application-to-application one-way delays."""
    seqs: dict[int, set[int]] = defaultdict(set)
    delays: dict[int, list[int]] = defaultdict(list)
    if path.exists():
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                burst = int(row["burst"])
                seq = int(row["seq"])
                if seq not in seqs[burst]:
                    seqs[burst].add(seq)
                    delays[burst].append(int(row["delay_ns"]))
    return {b: Delays.of(len(seqs[b]), delays[b]) for b in seqs}


def echoes_by_sender(path: Path) -> dict[str, Delays]:
    """The sender's echo log (seq,burst,send_ns,echo_ns,rtt_ns,from): round trips per
    echoing address (the IP, without the port)."""
    rtts: dict[str, list[int]] = defaultdict(list)
    seen: dict[str, set[int]] = defaultdict(set)
    if path.exists():
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                host = row["from"].rsplit(":", 1)[0]
                seq = int(row["seq"])
                if seq not in seen[host]:
                    seen[host].add(seq)
                    rtts[host].append(int(row["rtt_ns"]))
    return {h: Delays.of(len(v), v) for h, v in rtts.items()}
