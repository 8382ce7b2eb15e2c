"""Benchmark: nestbed-analyze against tcptrace and tshark on the same captures in the same run
(issue 7's targets): packets/s, CPU time and peak memory of each, and ours on growing files."""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nestbed.analysis import analyze, tcptrace
from nestbed.analysis.runner import analyzer_binary

# Captures: (1) a real bulk TCP transfer of about 284 000 packets: iperf3 between two network
# namespaces joined by a veth pair with segmentation offloads off, captured by tcpdump -s 96 at
# the sender (needs root; otherwise a synthetic single transfer of the same size stands in);
# (2) a synthetic one of about 2 million records built with numpy: 200 concurrent
# window-limited transfers over IPv4/Ethernet, snaplen 96, each segment ACKed, 0.1 % of
# segments retransmitted. Each tool runs once to warm up, then RUNS times (tshark once on the
# big capture: it takes minutes); the tables give medians.
FLOWS = 200
SEGMENTS = 5000  # per flow: 200 × 5000 × 2 ≈ 2 million records
WINDOW = 44  # segments per round trip (64 KB of 1448-byte segments)
RTT_NS = 20_000_000
MSS = 1448
SNAPLEN = 96
RUNS = 5
BULK_BYTES = 400_000_000  # about 276 000 data segments and 11 000 ACKs (stretch ACKs)

# tcptrace: -l long output (per direction: retransmissions, RTT samples/min/max/avg), -r RTT
# statistics, -n no name lookups. It prints packet counts, segment sizes, windows, RTT and
# retransmission statistics per connection; no time series, spacing, idle time or verdicts.
TCPTRACE = ["tcptrace", *tcptrace.ARGV]
# tshark: the per-packet fields our analysis is built from (time, 4-tuple, sequence/ACK
# numbers, payload length, scaled window) and tshark's own ACK RTT and retransmission flags,
# which need its TCP analysis (on by default); -n: no name lookups.
TSHARK_FIELDS = [
    "frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "tcp.flags",
    "tcp.seq", "tcp.ack", "tcp.len", "tcp.window_size", "tcp.analysis.ack_rtt",
    "tcp.analysis.retransmission",
]  # fmt: skip
TSHARK = ["tshark", "-n", "-T", "fields"] + [a for f in TSHARK_FIELDS for a in ("-e", f)]


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


SYN, FIN, ACK = 0x02, 0x01, 0x10
CHUNK = 1_000_000  # records built in memory at a time (the 20 M capture would need ~20 GB)
SEQUENTIAL_EVERY_NS = 14_000_000  # a new connection every 14 ms: about 10 open at once


def build(path: Path, flows: int = FLOWS, segments: int = SEGMENTS, *,
          sequential: bool = False) -> int:  # fmt: skip
    """Writes the synthetic capture; returns its number of records. ``sequential``: each
    flow a whole connection (handshake, data, FINs both ways), one starting every 14 ms
    (each lasts about 0.15 s), with ports and initial sequence numbers varying: the memory
    of an analyzer that keeps closed connections grows with their number."""
    rng = np.random.default_rng(7)
    flow = np.repeat(np.arange(flows), segments)
    i = np.tile(np.arange(segments), flows)
    if sequential:
        start = (np.arange(flows) * SEQUENTIAL_EVERY_NS + RTT_NS)[flow]
        isn = (np.arange(flows, dtype=np.int64) * 1_000_003 + 999) & 0xFFFFFFFF
    else:
        start = rng.integers(0, RTT_NS, flows)[flow]
        isn = np.full(flows, 999, dtype=np.int64)
    t_data = start + (i // WINDOW) * (RTT_NS + 10_000) + (i % WINDOW) * 12_000
    seq = (isn[flow] + 1 + i * MSS) & 0xFFFFFFFF
    again = rng.random(flow.size) < 0.001  # retransmitted 5 ms later
    zero = np.zeros_like(seq)
    kinds = [  # (time, flow, seq, ack, from the sender, flags)
        (t_data, flow, seq, zero, True, ACK),
        (t_data[again] + 5_000_000, flow[again], seq[again], zero[again], True, ACK),
        (t_data + RTT_NS, flow, zero, (seq + MSS) & 0xFFFFFFFF, False, ACK),
    ]
    if sequential:  # the receiver's ISN is 2^32 - 1, so its later segments have seq 0
        f = np.arange(flows)
        t0 = f * SEQUENTIAL_EVERY_NS
        last = t0 + RTT_NS + ((segments - 1) // WINDOW) * (RTT_NS + 10_000) + 2 * RTT_NS
        fin = (isn + 1 + segments * MSS) & 0xFFFFFFFF
        ones = np.ones_like(isn)
        kinds += [
            (t0, f, isn, 0 * isn, True, SYN),
            (
                t0 + RTT_NS - 20_000,
                f,
                ones * 0xFFFFFFFF,
                (isn + 1) & 0xFFFFFFFF,
                False,
                SYN | ACK,
            ),
            (t0 + RTT_NS - 10_000, f, (isn + 1) & 0xFFFFFFFF, 0 * isn, True, ACK),
            (last, f, fin, 0 * isn, True, FIN | ACK),
            (last + RTT_NS, f, 0 * isn, (fin + 1) & 0xFFFFFFFF, False, FIN | ACK),
            (last + RTT_NS + 10_000, f, (fin + 1) & 0xFFFFFFFF, ones, True, ACK),
        ]
    t = np.concatenate([k[0] for k in kinds]) + 1_700_000_000 * 10**9
    f = np.concatenate([k[1] for k in kinds])
    s = np.concatenate([k[2] for k in kinds])
    a = np.concatenate([k[3] for k in kinds])
    data = np.concatenate([np.full(k[0].size, j < 2) for j, k in enumerate(kinds)])
    sender = np.concatenate([np.full(k[0].size, k[4]) for k in kinds])
    fl = np.concatenate([np.full(k[0].size, k[5], dtype=np.uint8) for k in kinds])
    port = 40_000 + f if flows <= 25_000 else 1024 + f % 64_000
    # With the handshake captured the window counts (docs/analyze.md, packet spacing): the
    # largest unscaled one leaves an MSS open after each ACK of the 44-segment flight.
    window = 65535 if sequential else 16384
    order = np.argsort(t, kind="stable")
    t, port, s, a, data, sender, fl = (x[order] for x in (t, port, s, a, data, sender, fl))
    with path.open("wb") as out:
        out.write(np.array([0xA1B2C3D4, 0x00040002, 0, 0, SNAPLEN, 1], dtype="<u4").tobytes())
        for at in range(0, t.size, CHUNK):
            part = slice(at, at + CHUNK)
            out.write(_records(t[part], port[part], s[part], a[part], data[part],
                               sender[part], fl[part], window))  # fmt: skip
    return int(t.size)


def _records(t: np.ndarray, ports: np.ndarray, s: np.ndarray, a: np.ndarray, data: np.ndarray,
             sender: np.ndarray, fl: np.ndarray, window: int) -> bytes:  # fmt: skip
    """The pcap records (header and frame) of segments already in capture order, advertising
    ``window`` bytes."""
    full = {True: _frame(MSS), False: _frame(0)}
    caplen = {d: min(SNAPLEN, full[d].size) for d in (True, False)}
    size = np.where(data, 16 + caplen[True], 16 + caplen[False])
    offsets = np.concatenate([[0], np.cumsum(size)[:-1]])
    buf = np.zeros(int(size.sum()), dtype=np.uint8)
    for d in (True, False):
        m = data == d
        rows = np.tile(np.concatenate([np.zeros(16, np.uint8), full[d][: caplen[d]]]), (m.sum(), 1))
        _put(rows, 0, t[m] // 10**9, "<u4")
        _put(rows, 4, (t[m] % 10**9) // 1000, "<u4")
        _put(rows, 8, np.full(m.sum(), caplen[d]), "<u4")
        _put(rows, 12, np.full(m.sum(), full[d].size), "<u4")
        port = ports[m]
        back = ~sender[m]  # from the receiver: swap the addresses and ports
        sport = np.where(back, 5001, port)
        dport = np.where(back, port, 5001)
        src = rows[:, 16 + 26 : 16 + 30].copy()
        rows[back, 16 + 26 : 16 + 30] = rows[back, 16 + 30 : 16 + 34]
        rows[back, 16 + 30 : 16 + 34] = src[back]
        _put(rows, 16 + 34, sport, ">u2")
        _put(rows, 16 + 36, dport, ">u2")
        _put(rows, 16 + 38, s[m], ">u4")
        _put(rows, 16 + 42, a[m], ">u4")
        rows[:, 16 + 47] = fl[m]
        _put(rows, 16 + 48, np.full(m.sum(), window), ">u2")
        buf[offsets[m][:, None] + np.arange(rows.shape[1])] = rows
    return buf.tobytes()


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


def capture_bulk(path: Path, nbytes: int = BULK_BYTES) -> str | None:
    """Captures one real iperf3 transfer of ``nbytes`` at its sender; returns how, or None
    when this machine cannot (not root, or no ip/iperf3/tcpdump/ethtool)."""
    tools = ("ip", "iperf3", "tcpdump", "ethtool")
    if os.geteuid() != 0 or not all(shutil.which(t) for t in tools):
        return None
    tag = f"{os.getpid() % 100_000}"
    a, b = f"nbbench-a{tag}", f"nbbench-b{tag}"
    va, vb = f"nbva{tag}", f"nbvb{tag}"
    started: list[subprocess.Popen[str]] = []
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", a)
        _ip("link", "set", vb, "netns", b)
        for ns, dev, addr in ((a, va, "10.213.0.1/24"), (b, vb, "10.213.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # Without this the capture holds 64 KB super-segments, not what a wire carries.
            off = ["tso", "off", "gso", "off", "gro", "off"]
            subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, *off],
                           check=True, capture_output=True)  # fmt: skip
        dump = subprocess.Popen(
            ["ip", "netns", "exec", a, "tcpdump", "-i", va, "-s", str(SNAPLEN), "-B", "65536",
             "-w", str(path), "tcp", "port", "5201"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        started.append(dump)
        assert dump.stderr is not None
        dump.stderr.readline()  # "listening on …": the capture has started
        server = subprocess.Popen(["ip", "netns", "exec", b, "iperf3", "-s", "-1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  text=True)  # fmt: skip
        started.append(server)
        time.sleep(0.5)
        subprocess.run(["ip", "netns", "exec", a, "iperf3", "-c", "10.213.0.2", "-n", str(nbytes)],
                       check=True, capture_output=True, timeout=300)  # fmt: skip
        server.wait(timeout=30)
        time.sleep(0.3)
        dump.send_signal(signal.SIGINT)
        stats = dump.communicate(timeout=30)[1].strip().splitlines()
        dropped = next((line for line in stats if "dropped by kernel" in line), "?")
        return (f"iperf3 -n {nbytes} over a veth pair between two namespaces (MTU 1500, "
                f"TSO/GSO/GRO off), tcpdump -s {SNAPLEN} at the sender: {dropped}")  # fmt: skip
    finally:
        for child in started:  # after a failure: a process would keep its namespace alive
            if child.poll() is None:
                child.kill()
                child.wait()
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@dataclass
class Run:
    """One run of a program: wall-clock and CPU seconds, peak resident memory."""

    wall_s: float
    cpu_s: float
    rss_mb: float
    output: str


def timed(argv: list[str], out: Path) -> Run:
    """Runs ``argv`` with its output into ``out``. Under /usr/bin/time: a child forked from
    this big process starts with this process's peak RSS as its own (Linux keeps it across
    exec), a grandchild forked from the small `time` does not. CPU time is the children's
    usage delta (microseconds; `time` prints hundredths)."""
    report = out.with_suffix(".rss")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    with out.open("w") as sink:
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(report), *argv],
                              stdout=sink, stderr=subprocess.DEVNULL, check=False)  # fmt: skip
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {' '.join(argv)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss_kb = int(report.read_text().split()[-1])
    return Run(wall, cpu, rss_kb / 1024, out.read_text(errors="replace")[:4000])


def median_run(argv: list[str], runs: int, out: Path) -> tuple[Run, list[Run]]:
    if runs > 1:
        timed(argv, out)  # warm-up, not counted: page cache, binary, libraries
    done = [timed(argv, out) for _ in range(runs)]
    middle = Run(*(statistics.median(getattr(r, k) for r in done) for k in ("wall_s", "cpu_s",
                 "rss_mb")), done[-1].output)  # fmt: skip
    return middle, done


def packets(pcap: Path) -> int:
    """Records in a pcap (the bulk capture's count is known only from the file)."""
    data = pcap.read_bytes()
    n, at = 0, 24
    while at + 16 <= len(data):
        at += 16 + int.from_bytes(data[at + 8 : at + 12], "little")
        n += 1
    return n


def compare(name: str, pcap: Path, n: int, runs: int, tshark_runs: int) -> None:
    """Times the three tools on ``pcap`` in turn and prints one table."""
    binary = analyzer_binary()
    tools = [("nestbed-analyze", [binary, str(pcap)], runs)]
    if shutil.which("tcptrace"):
        tools.append(("tcptrace " + " ".join(TCPTRACE[1:]), [*TCPTRACE, str(pcap)], runs))
    if shutil.which("tshark"):
        tools.append(("tshark -T fields (12 fields)", [*TSHARK, "-r", str(pcap)], tshark_runs))
    out = pcap.with_suffix(".out")
    results = {label: median_run(argv, k, out) for label, argv, k in tools}
    out.unlink()
    ours = results["nestbed-analyze"][0]
    print(f"\n{name}: {n:,} packets, {pcap.stat().st_size / 1e6:.0f} MB")
    print(
        "| tool | runs | wall s (median; range) | packets/s | CPU s | packets/CPU-s "
        "| peak RSS MB | ours × faster (wall / CPU) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, _, k in tools:
        r, every = results[label]
        spread = f"{min(x.wall_s for x in every):.3f}–{max(x.wall_s for x in every):.3f}"
        print(f"| {label} | {k} | {r.wall_s:.3f}; {spread} | {n / r.wall_s / 1e6:.2f} M "
              f"| {r.cpu_s:.3f} | {n / r.cpu_s / 1e6:.2f} M | {r.rss_mb:.0f} "
              f"| {r.wall_s / ours.wall_s:.1f} / {r.cpu_s / ours.cpu_s:.1f} |")  # fmt: skip
        if label.startswith("tcptrace"):
            # tcptrace times itself from its first packet to its last, leaving out its start
            # and exit; the 4.8 M figure is probably this one.
            said = [line for line in r.output.splitlines() if "pkts/sec analyzed" in line]
            print(f"  (tcptrace's own figure, last run: {said[0].strip() if said else '?'})")
    missing = [t for t in ("tcptrace", "tshark") if not shutil.which(t)]
    if missing:
        print(f"(not installed, not timed: {', '.join(missing)}; `make setup` installs them)")


def agreement(pcap: Path, work: Path) -> None:
    """Per transfer, ours against tcptrace on their common definition (docs/analyze.md,
    Speed): tcptrace's RTT samples of the SYN and the FIN (found in its -Z dump by sequence
    number) left out."""
    theirs = tcptrace.figures(TCPTRACE[0], pcap, work)
    ours = json.loads(subprocess.run([analyzer_binary(), str(pcap)], capture_output=True,
                                     text=True, check=True).stdout)  # fmt: skip
    print("\nagreement with tcptrace on this capture, per transfer (ours / tcptrace):")
    print(
        "| transfer | data segments | retransmitted | RTT samples (tcptrace's raw count) "
        "| mean RTT ms (tcptrace's raw mean, printed to 0.1 ms) |"
    )
    print("|---|---|---|---|---|")
    for t in ours["transfers"]:
        tt = theirs[(t["src"], t["sport"], t["dst"], t["dport"])]
        n, mean_theirs = tcptrace.on_common_definition(t, tt)
        mean = t["rtt"]["mean_s"] or 0.0
        print(f"| {t['src']}:{t['sport']} → {t['dst']}:{t['dport']} "
              f"| {t['data_segments']} / {tt['data_segments']} "
              f"| {t['retransmitted_segments']} / {tt['retransmitted']} "
              f"| {t['rtt']['count']} / {n} ({tt['rtt_samples']}) "
              f"| {mean * 1e3:.3f} / {mean_theirs * 1e3:.3f} ({tt['rtt_avg_ms']}) |")  # fmt: skip


# Growing captures: (segments per flow, flows) of the concurrent layout (200 transfers at
# once, as the synthetic capture) and of the sequential one (200-segment connections one
# after another, about 10 open at once), for about 0.5, 2, 8 and 20 million records.
GROWTH = {
    "concurrent": [(1250, 200), (5000, 200), (20000, 200), (50000, 200)],
    "sequential": [(200, 1232), (200, 4926), (200, 19704), (200, 49261)],
}


def memory_growth(tmp: Path, runs: int, baseline: str | None, largest: int) -> None:
    """Peak memory and time of nestbed-analyze (and of a ``baseline`` build of it) on
    synthetic captures of growing size, without and with --tables; medians of ``runs``."""
    binaries = [("nestbed-analyze", analyzer_binary())]
    if baseline:
        binaries.append(("baseline", baseline))
    print("\nnestbed-analyze on growing captures (medians; RSS is /usr/bin/time's %M):")
    print("| layout | records | file MB | tables | binary | wall s | CPU s | M packets/CPU-s "
          "| peak RSS MB | peak open connections |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layout, sizes in GROWTH.items():
        for segments, flows in sizes[:largest]:
            pcap = tmp / f"grow-{layout}-{segments}-{flows}.pcap"
            n = build(pcap, flows=flows, segments=segments, sequential=layout == "sequential")
            for tables in (False, True):
                for label, binary in binaries:
                    argv = [binary, *(["--tables", str(tmp / "grow-tables")] * tables), str(pcap)]
                    r, _ = median_run(argv, runs, tmp / "grow.out")
                    peak = re.search(r'"peak_open_connections":(\d+)', r.output)
                    print(f"| {layout} | {n:,} | {pcap.stat().st_size / 1e6:.0f} "
                          f"| {'yes' if tables else 'no'} | {label} | {r.wall_s:.2f} "
                          f"| {r.cpu_s:.2f} | {n / r.cpu_s / 1e6:.2f} | {r.rss_mb:.0f} "
                          f"| {peak.group(1) if peak else '—'} |", flush=True)  # fmt: skip
                    shutil.rmtree(tmp / "grow-tables", ignore_errors=True)
            pcap.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--tshark-runs", type=int, default=3, help="on the bulk capture")
    parser.add_argument("--quick", action="store_true", help="no analyze(), no memory growth")
    parser.add_argument("--memory-only", action="store_true", help="only the growing captures")
    parser.add_argument("--memory-runs", type=int, default=3)
    parser.add_argument("--sizes", type=int, default=4, help="growing captures: the first N "
                        "of 0.5, 2, 8, 20 million records")  # fmt: skip
    parser.add_argument("--baseline", metavar="BINARY",
                        help="another nestbed-analyze build to time beside this one")  # fmt: skip
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} cores")  # fmt: skip
    with tempfile.TemporaryDirectory(dir=os.environ.get("NESTBED_BENCH_TMP")) as name:
        tmp = Path(name)
        if args.memory_only:
            memory_growth(tmp, args.memory_runs, args.baseline, args.sizes)
            return
        bulk = tmp / "bulk.pcap"
        how = capture_bulk(bulk)
        if how is None:
            how = "synthetic stand-in: one transfer, as the 2 M one (not root)"
            build(bulk, flows=1, segments=142_000)
        print(f"bulk capture: {how}")
        time.sleep(2)  # namespace teardown runs in the kernel for a while after the capture
        compare("bulk TCP transfer", bulk, packets(bulk), args.runs, args.tshark_runs)
        if shutil.which("tcptrace"):
            agreement(bulk, tmp / "agreement")

        pcap = tmp / "big.pcap"
        began = time.perf_counter()
        n = build(pcap)
        print(f"\nsynthetic capture built in {time.perf_counter() - began:.1f} s")
        compare("synthetic, 200 transfers", pcap, n, args.runs, 1)

        if not args.quick:
            binary = analyzer_binary()
            tables = timed([binary, "--tables", str(tmp / "tables"), str(pcap)], tmp / "t.out")
            began = time.perf_counter()
            summary = analyze([pcap], tmp / "out")
            whole = time.perf_counter() - began
            print(f"\nnestbed-analyze --tables:   {n / tables.wall_s / 1e6:.2f} M packets/s "
                  f"({tables.wall_s:.2f} s, {tables.rss_mb:.0f} MB)")  # fmt: skip
            print(f"analyze() with plots:       {n / whole / 1e6:.2f} M packets/s ({whole:.2f} s)")
            print(f"transfers: {len(summary['transfers'])}, verdicts: {summary['verdicts']}")
            pcap.unlink()
            memory_growth(tmp, args.memory_runs, args.baseline, args.sizes)
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"this process's children: {resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime:.0f} "
          "s user")  # fmt: skip


if __name__ == "__main__":
    main()
