"""Benchmark: nestbed-sim, the simulated part of an experiment (medians of 5 runs).

1. Start-up and memory: time from starting nestbed-sim to its "ready" line, and its resident
   memory after 2 s of real time, for simulated chains of 2, 100 and 300 routers (Netbed's
   §5.5 ran 300 simulated nodes), and the worst lag behind real time while idle.
2. Across the example (needs root): ping RTT between hybrid.ns's two emulated hosts through the
   simulated 2 Mb/s, 20 ms link, against 2 × (20 ms + serialization); and the rate of a
   4 Mb/s nestbed-probe stream carried by it, against the link's ceiling.
3. The scale test of Netbed §5.5 (needs root): N simulated pairs of nodes, each pair's 2 Mb/s,
   50 ms link filled by simulated CBR (UDP), in the same nestbed-sim as a 2 Mb/s, 50 ms link
   that carries a live TCP flow (iperf3, 8 s) between two emulated hosts; N grows until the
   live flow falls below 95 % of its rate with no simulated traffic.

Printed as tables; the figures go into docs/benchmarks.md. The cppyy route (importing the
ns3 wheel's Python bindings) is not measured here: it needs cppyy built from source; issue 25
measured ~19 s and ~640 MB per process.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from nestbed.backend import sim, simplan
from nestbed.binaries import built_binary, probe_recv, probe_send
from nestbed.spec import load
from nestbed.spec import yaml as yaml_front_end
from nestbed.spec.resolve import resolve

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RUNS = 5


def chain(routers: int) -> str:
    """A description of ROUTERS simulated routers in a chain of 2 Mb/s, 50 ms links."""
    lines = [f"node r{i}" for i in range(routers)]
    for i in range(routers - 1):
        a, b = divmod(i, 250)
        lines.append(
            f"p2p c{i} r{i} 10.{a}.{b}.1/30 r{i + 1} 10.{a}.{b}.2/30 2000000 2000000 0.05 50 0 0"
        )
    return "\n".join([*lines, "end"]) + "\n"


def start_once(description: str) -> tuple[float, int, float]:
    """Seconds to "ready", resident kB after 2 s, worst lag (s) over those 2 s."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [built_binary("nestbed-sim")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(description)
    process.stdin.close()
    assert process.stdout.readline().strip() == "ready"
    ready_s = time.perf_counter() - began
    time.sleep(2.0)
    status = Path(f"/proc/{process.pid}/status").read_text()
    rss_kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    process.send_signal(signal.SIGTERM)
    out = process.stdout.read()
    process.wait(timeout=10)
    return ready_s, rss_kb, sim.lag(out).worst_s


def startup_table() -> None:
    print(f"nestbed-sim start-up and memory, median of {RUNS} runs")
    print(f"{'routers':>8}{'links':>7}{'ready ms':>10}{'RSS MB':>8}{'idle worst lag ms':>19}")
    for routers in (2, 100, 300):
        runs = [start_once(chain(routers)) for _ in range(RUNS)]
        ready = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        lag = statistics.median(r[2] for r in runs)
        print(
            f"{routers:>8}{routers - 1:>7}{ready * 1e3:>10.1f}{rss / 1024:>8.1f}{lag * 1e3:>19.3f}"
        )


def across_example() -> None:
    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    exp = load(EXAMPLES / "hybrid.ns").experiment
    exp = exp.model_copy(update={"name": f"benchhybrid{os.getpid()}"})
    p = plan(exp)
    linux.swap_in(p)
    try:
        rtts, rates = [], []
        address = exp.links[2].port("h2").ip
        for _ in range(RUNS):
            done = linux.exec_in(
                p, "h1", ["ping", "-c", "20", "-i", "0.1", address], capture_output=True, text=True
            )
            rtts.append(
                statistics.median(float(m) for m in re.findall(r"time=([\d.]+)", done.stdout))
            )
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "recv.csv"
                receiver = linux.start_in(
                    p, "h2", probe_recv(f"{address}:9000", "--idle", "2", "--log", str(log)),
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
                linux.wait_listening(receiver, 9000, "udp")
                linux.exec_in(
                    p, "h1", probe_send(f"{address}:9000", "--size", "1000", "--rate", "4M",
                                        "--duration", "3"),
                    capture_output=True,
                )  # fmt: skip
                receiver.wait(timeout=30)
                with log.open() as f:
                    times = [int(r["recv_ns"]) for r in csv.DictReader(f)]
                rates.append((len(times) - 1) * 1028 * 8 / ((times[-1] - times[0]) / 1e9))
        lag = sim.lag((linux.run_dir(p) / sim.LOG).read_text())
    finally:
        linux.swap_out(p)
    expected_rtt = 2 * (0.020 + 86 * 8 / 2e6) * 1e3
    ceiling = 2e6 * 1028 / 1030
    print(f"\nacross examples/hybrid.ns (2 Mb/s, 20 ms simulated link), median of {RUNS} runs")
    print(f"{'measure':<28}{'expected':>10}{'measured':>10}{'error %':>9}")
    rtt = statistics.median(rtts)
    print(f"{'ping RTT ms (84 B)':<28}{expected_rtt:>10.3f}{rtt:>10.3f}"
          f"{(rtt / expected_rtt - 1) * 100:>+9.2f}")  # fmt: skip
    rate = statistics.median(rates) / 1e6
    print(f"{'IP rate Mb/s (1028 B, 4M in)':<28}{ceiling / 1e6:>10.4f}{rate:>10.4f}"
          f"{(rate / (ceiling / 1e6) - 1) * 100:>+9.2f}")  # fmt: skip
    print(f"nestbed-sim worst lag {lag.worst_s * 1e3:.3f} ms; samples past 5 ms: {lag.late}")


def scale_experiment(pairs: int):  # type: ignore[no-untyped-def]
    """h1 - r1 - r2 - h2 with a simulated 2 Mb/s, 50 ms core, and PAIRS simulated pairs."""
    nodes = [
        "{name: h1}",
        "{name: h2}",
        "{name: r1, simulated: true}",
        "{name: r2, simulated: true}",
    ]
    links = [
        "{name: a1, members: [h1, r1], simulated: true}",
        "{name: core, members: [r1, r2], bandwidth: 2Mb, delay: 50ms, simulated: true}",
        "{name: a2, members: [r2, h2], simulated: true}",
    ]
    for i in range(pairs):
        nodes += [f"{{name: s{i}a, simulated: true}}", f"{{name: s{i}b, simulated: true}}"]
        links.append(
            f"{{name: c{i}, members: [s{i}a, s{i}b], bandwidth: 2Mb, delay: 50ms, simulated: true}}"
        )
    text = "routing: static\nnodes:\n" + "".join(f"  - {n}\n" for n in nodes)
    text += "links:\n" + "".join(f"  - {link}\n" for link in links)
    document, locations = yaml_front_end.read(text, "scale.yaml")
    exp = resolve(document, file="scale.yaml", locations=locations)
    return exp.model_copy(update={"name": f"benchscale{os.getpid()}"})


def live_tcp_bps(pairs: int) -> tuple[float, float, int]:
    """The live TCP flow's rate beside PAIRS saturated simulated links; worst lag, late."""
    from dataclasses import replace

    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    exp = scale_experiment(pairs)
    payload = 1000  # bytes; the rate fills the link exactly with ns-3's 30 bytes of headers
    traffic = tuple(
        simplan.cbr(f"f{i}", f"s{i}a", exp.links[3 + i].port(f"s{i}b").ip, port=9,
                    packet_bytes=payload, rate_bps=2_000_000 * payload // (payload + 30))
        for i in range(pairs)
    )  # fmt: skip
    p = plan(exp)
    p = replace(p, simulation=replace(p.simulation, traffic=traffic))
    linux.swap_in(p)
    try:
        server = exp.links[2].port("h2").ip
        receiver = linux.start_in(
            p, "h2", ["iperf3", "-s", "-1", "-p", "5299", "-B", server], stdout=subprocess.DEVNULL
        )
        linux.wait_listening(receiver, 5299, "tcp")
        done = linux.exec_in(
            p, "h1", ["iperf3", "-c", server, "-p", "5299", "-t", "8", "-J"],
            capture_output=True, text=True,
        )  # fmt: skip
        receiver.wait(timeout=30)
        import json

        rate = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]
        lag = sim.lag((linux.run_dir(p) / sim.LOG).read_text())
    finally:
        linux.swap_out(p)
    return rate, lag.worst_s, lag.late


def scale_table() -> None:
    print("\nscale (Netbed §5.5): a live TCP flow beside N saturated simulated 2 Mb/s links")
    print(f"{'N links':>8}{'sim nodes':>10}{'TCP Mb/s':>10}{'of N=0':>8}{'worst lag ms':>14}"
          f"{'late samples':>14}")  # fmt: skip
    base = None
    for pairs in (0, 25, 50, 75, 100, 125, 150, 200, 300):
        rate, worst, late = live_tcp_bps(pairs)
        base = base or rate
        print(f"{pairs:>8}{2 * pairs + 2:>10}{rate / 1e6:>10.3f}{rate / base:>8.2f}"
              f"{worst * 1e3:>14.1f}{late:>14}")  # fmt: skip
        if rate < 0.95 * base:
            break
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def main() -> None:
    startup_table()
    if os.geteuid() == 0:
        across_example()
        scale_table()
    else:
        print("\n(across the example: needs root)")


if __name__ == "__main__":
    main()
