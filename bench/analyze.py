"""Benchmark: packets per second of the trace analysis on a large synthetic capture.

The capture (built here with numpy, about 2 million records, snaplen 96 as `tcpdump -s 96`
writes) holds 200 concurrent window-limited TCP transfers over IPv4/Ethernet, each ACKed per
segment with 0.1 % of segments retransmitted. Timed: nestbed-analyze alone (median of 3
runs), nestbed-analyze writing its CSV tables, and the whole `nestbed.analysis.analyze`
(verdicts, tables, plots). Target: at least 1 million packets per second for the analyzer.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from nestbed.analysis import analyze
from nestbed.analysis.runner import analyzer_binary

FLOWS = 200
SEGMENTS = 5000  # per flow: 200 × 5000 × 2 ≈ 2 million records
WINDOW = 44  # segments per round trip (64 KB of 1448-byte segments)
RTT_NS = 20_000_000
MSS = 1448
SNAPLEN = 96
RUNS = 3


def _frame(payload: int) -> np.ndarray:
    """Ethernet + IPv4 + TCP headers of a segment from 10.0.0.1 to 10.0.0.2."""
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    ip = bytes([0x45, 0]) + (40 + payload).to_bytes(2, "big") + bytes([0, 0, 0x40, 0, 64, 6, 0, 0])
    ip += bytes([10, 0, 0, 1, 10, 0, 0, 2])
    tcp = bytes(12) + bytes([0x50, 0x10]) + (16384).to_bytes(2, "big") + bytes(4)
    return np.frombuffer(eth + ip + tcp + bytes(payload), dtype=np.uint8)


def _put(rows: np.ndarray, at: int, values: np.ndarray, dtype: str) -> None:
    width = np.dtype(dtype).itemsize
    rows[:, at : at + width] = values.astype(dtype).view(np.uint8).reshape(-1, width)


def build(path: Path) -> int:
    """Writes the capture; returns its number of records."""
    rng = np.random.default_rng(7)
    flow = np.repeat(np.arange(FLOWS), SEGMENTS)
    i = np.tile(np.arange(SEGMENTS), FLOWS)
    start = rng.integers(0, RTT_NS, FLOWS)[flow]
    t_data = start + (i // WINDOW) * (RTT_NS + 10_000) + (i % WINDOW) * 12_000
    seq = (1_000 + i * MSS) & 0xFFFFFFFF
    again = rng.random(flow.size) < 0.001  # retransmitted 5 ms later
    kinds = [  # (time, flow, seq, ack, from the sender)
        (t_data, flow, seq, np.zeros_like(seq), True),
        (t_data[again] + 5_000_000, flow[again], seq[again], np.zeros_like(seq[again]), True),
        (t_data + RTT_NS, flow, np.zeros_like(seq), (seq + MSS) & 0xFFFFFFFF, False),
    ]
    t = np.concatenate([k[0] for k in kinds]) + 1_700_000_000 * 10**9
    f = np.concatenate([k[1] for k in kinds])
    s = np.concatenate([k[2] for k in kinds])
    a = np.concatenate([k[3] for k in kinds])
    data = np.concatenate([np.full(k[0].size, k[4]) for k in kinds])
    order = np.argsort(t, kind="stable")
    t, f, s, a, data = t[order], f[order], s[order], a[order], data[order]
    full = {True: _frame(MSS), False: _frame(0)}
    caplen = {d: min(SNAPLEN, full[d].size) for d in (True, False)}
    size = np.where(data, 16 + caplen[True], 16 + caplen[False])
    offsets = np.concatenate([[0], np.cumsum(size)[:-1]]) + 24
    buf = np.zeros(24 + int(size.sum()), dtype=np.uint8)
    header = np.array([0xA1B2C3D4, 0x00040002, 0, 0, SNAPLEN, 1], dtype="<u4")
    buf[:24] = header.view(np.uint8)
    for d in (True, False):
        m = data == d
        rows = np.tile(np.concatenate([np.zeros(16, np.uint8), full[d][: caplen[d]]]), (m.sum(), 1))
        _put(rows, 0, t[m] // 10**9, "<u4")
        _put(rows, 4, (t[m] % 10**9) // 1000, "<u4")
        _put(rows, 8, np.full(m.sum(), caplen[d]), "<u4")
        _put(rows, 12, np.full(m.sum(), full[d].size), "<u4")
        ports = (40_000 + f[m], np.full(m.sum(), 5001))
        sport, dport = ports if d else ports[::-1]
        if not d:  # ACKs come from the receiver: swap the addresses too
            rows[:, 16 + 26 : 16 + 30], rows[:, 16 + 30 : 16 + 34] = (
                rows[:, 16 + 30 : 16 + 34].copy(), rows[:, 16 + 26 : 16 + 30].copy())  # fmt: skip
        _put(rows, 16 + 34, sport, ">u2")
        _put(rows, 16 + 36, dport, ">u2")
        _put(rows, 16 + 38, s[m], ">u4")
        _put(rows, 16 + 42, a[m], ">u4")
        buf[offsets[m][:, None] + np.arange(rows.shape[1])] = rows
    path.write_bytes(buf.tobytes())
    return int(t.size)


def timed(argv: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pcap = Path(tmp) / "big.pcap"
        began = time.perf_counter()
        n = build(pcap)
        print(f"capture: {n:,} records, {pcap.stat().st_size / 1e6:.0f} MB, "
              f"built in {time.perf_counter() - began:.1f} s")  # fmt: skip
        binary = analyzer_binary()
        alone = statistics.median(timed([binary, str(pcap)]) for _ in range(RUNS))
        tables = timed([binary, "--tables", str(Path(tmp) / "tables"), str(pcap)])
        began = time.perf_counter()
        summary = analyze([pcap], Path(tmp) / "out")
        whole = time.perf_counter() - began
        verdicts = summary["verdicts"]
        print(f"nestbed-analyze:            {n / alone / 1e6:.2f} M packets/s ({alone:.2f} s)")
        print(f"nestbed-analyze --tables:   {n / tables / 1e6:.2f} M packets/s ({tables:.2f} s)")
        print(f"analyze() with plots:       {n / whole / 1e6:.2f} M packets/s ({whole:.2f} s)")
        print(f"transfers: {len(summary['transfers'])}, verdicts: {verdicts}")


if __name__ == "__main__":
    main()
