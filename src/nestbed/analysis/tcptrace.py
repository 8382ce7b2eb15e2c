"""tcptrace's figures for a capture, on nestbed-analyze's definitions: the peer the analyzer
is checked against (tests/analysis/test_tcptrace.py) and measured beside (bench/analyze.py)."""

from __future__ import annotations

import csv
import io
import subprocess
from pathlib import Path
from typing import Any

# Long output, relative sequence numbers off, no name lookups: the figures compared.
ARGV = ("-l", "-r", "-n")

Direction = tuple[str, int, str, int]  # src, sport, dst, dport


def letters(n: int) -> str:
    """tcptrace's host letters: a, b, …, z, aa, ab, …"""
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(97 + r) + s
    return s


def figures(binary: str, pcap: Path, work: Path) -> dict[Direction, dict[str, Any]]:
    """Per direction: tcptrace's RTT samples, their mean (ms, as it prints it), retransmitted
    and data segments, and the sequence number and whole milliseconds of every sample (-Z
    dumps them into ``work``, which must not exist yet)."""
    work.mkdir()
    argv = [binary, *ARGV, "--csv", "-Z", str(pcap.resolve())]
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=True)
    lines = [x for x in done.stdout.splitlines() if "," in x and not x.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    head = [h.strip() for h in rows[0]]
    found = {}
    for number, row in enumerate(rows[1:]):
        r = {k: v.strip() for k, v in zip(head, row, strict=False)}
        a, b = (r["host_a"], int(r["port_a"])), (r["host_b"], int(r["port_b"]))
        for way, (src, dst), (x, y) in (("a2b", (a, b), (0, 1)), ("b2a", (b, a), (1, 0))):
            dump = work / f"{letters(2 * number + x)}2{letters(2 * number + y)}_rttraw.dat"
            text = dump.read_text() if dump.exists() else ""  # none without samples
            found[(*src, *dst)] = {
                "rtt_samples": int(r[f"RTT_samples_{way}"]),
                "rtt_avg_ms": float(r[f"RTT_avg_{way}"]),
                "retransmitted": int(r[f"rexmt_data_pkts_{way}"]),
                "data_segments": int(r[f"actual_data_pkts_{way}"]),
                "dump": [tuple(map(int, line.split())) for line in text.splitlines()],
            }
    return found


def on_common_definition(ours: dict[str, Any], theirs: dict[str, Any]) -> tuple[int, float]:
    """tcptrace's sample count and mean RTT (s) for the transfer ``ours`` (a transfer of
    nestbed-analyze's report) without its samples of the SYN and the FIN, which it sequences
    like data (nestbed samples data only; docs/analyze.md, Speed)."""
    syn = ours["first_seq"]
    fin = (syn + 1 + ours["unique_bytes"]) & 0xFFFFFFFF
    control = [ms for seq, ms in theirs["dump"] if seq in (syn, fin)]
    n = theirs["rtt_samples"] - len(control)
    # The mean is printed to 0.1 ms and the dump truncates to whole ms: both errors are far
    # below 1 % of RTTs of 20 ms or more over hundreds of samples.
    total_ms = theirs["rtt_avg_ms"] * theirs["rtt_samples"] - sum(control)
    return n, total_ms / n / 1000 if n else 0.0
