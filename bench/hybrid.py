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
4. Packet rate (needs root): 64-byte frames at a growing rate for 5 s each, (a) live, from
   one emulated host to another through two simulated routers and their unshaped link, as
   Netbed measured nse's maximum stable rate (4000 packets/s), (b) inside the simulation,
   from one simulated router to the other (nestbed-sim's own traffic tools), and (c) the
   same across a simulated LAN with a 2 ms delay, 1 ms each way to and from its switch
   (a shared CSMA channel, as simulated LANs once were, carried about 450 a second); per rate the
   share received, the worst per-second lag behind real time, the seconds over the 5 ms
   limit, and the machine's steal time and load over the same seconds. The sustained rate is
   the highest with at least 99.9 % received and no second over the limit.

Printed as tables; the figures go into docs/benchmarks.md. The cppyy route (importing the
ns3 wheel's Python bindings) is not measured here: it needs cppyy built from source; issue 25
measured ~19 s and ~640 MB per process.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nestbed.backend import sim, simplan
from nestbed.binaries import built_binary, probe_recv, probe_send
from nestbed.errors import NestbedError
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
            f"p2p c{i} r{i} 10.{a}.{b}.1/30 r{i + 1} 10.{a}.{b}.2/30 2000000 2000000 0.05 50 50 0 0"
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
    # A simulated link, like an emulated one, carries each IP packet as an Ethernet frame on
    # the wire (38 bytes more).
    expected_rtt = 2 * (0.020 + (84 + 38) * 8 / 2e6) * 1e3
    ceiling = 2e6 * 1028 / (1028 + 38)
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
    # The most links at full rate, and the most at full rate with no lag sample past 5 ms.
    full, on_time = 0, 0
    for pairs in (0, 50, 100, 150, 200, 250, 300, 350, 400, 500, 600, 800):
        rate, worst, late = live_tcp_bps(pairs)
        base = base or rate
        print(f"{pairs:>8}{2 * pairs + 2:>10}{rate / 1e6:>10.3f}{rate / base:>8.2f}"
              f"{worst * 1e3:>14.1f}{late:>14}")  # fmt: skip
        if rate < 0.95 * base:
            break
        full = pairs
        on_time = pairs if late == 0 else on_time
    print(
        f"the live flow at full rate beside {full} simulated links ({2 * full + 2} nodes), "
        f"and beside {on_time} with no lag sample past 5 ms; nestbed-sim's simulator is one "
        "thread, one core"
    )
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


RATE_SECONDS = 5
RATES_PPS = (2000, 4000, 8000, 12_000, 16_000, 20_000, 30_000, 40_000, 60_000)
RATE_PAYLOAD = 18  # a 64-byte Ethernet frame


def cpu_times() -> list[int]:
    """The machine's CPU times (/proc/stat): user nice system idle iowait irq softirq steal."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]


def steal_share(before: list[int], after: list[int]) -> float:
    spent = [b - a for a, b in zip(before, after, strict=True)]
    return spent[7] / sum(spent) if sum(spent) else 0.0


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds a process has used (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lag_since(log: Path, offset: int) -> list[float]:
    """The per-second lag lines nestbed-sim logged after byte OFFSET of its log."""
    with log.open("rb") as f:
        f.seek(offset)
        return [lag_s for _, lag_s in sim.lag(f.read().decode()).per_second_s]


def rate_experiment():  # type: ignore[no-untyped-def]
    text = """
routing: static
nodes: [{name: h1}, {name: h2}, {name: r1, simulated: true}, {name: r2, simulated: true},
        {name: r3, simulated: true}, {name: r4, simulated: true}]
links:
  - {name: a1, members: [h1, r1], simulated: true}
  - {name: core, members: [r1, r2], simulated: true}
  - {name: a2, members: [r2, h2], simulated: true}
lans:
  - {name: ether, members: [r3, r4], delay: 2ms, simulated: true}
"""
    document, locations = yaml_front_end.read(text, "rate.yaml")
    exp = resolve(document, file="rate.yaml", locations=locations)
    return exp.model_copy(update={"name": f"benchrate{os.getpid()}"})


def rate_once(p, exp, path: str, pps: int, tmp: Path) -> dict:  # type: ignore[no-untyped-def]
    """PPS packets a second for RATE_SECONDS along PATH ("live", "inside" or "lan")."""
    from nestbed.backend import linux

    directory = linux.run_dir(p)
    log = directory / sim.LOG
    offset = log.stat().st_size
    count = pps * RATE_SECONDS
    pid = int((directory / sim.PID).read_text())
    before, load, cpu_before = cpu_times(), os.getloadavg()[0], process_cpu_s(pid)
    if path == "live":
        address = exp.links[2].port("h2").ip
        receiver = linux.start_in(
            p, "h2", probe_recv(f"{address}:9000", "--idle", "2", "--expect", str(count)),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        linux.wait_listening(receiver, 9000, "udp")
        linux.exec_in(
            p, "h1", probe_send(f"{address}:9000", "--size", str(RATE_PAYLOAD), "--pps",
                                str(pps), "--count", str(count)),
            capture_output=True,
        )  # fmt: skip
        out, _ = receiver.communicate(timeout=60)
        received = json.loads(out)["unique"]
    else:
        inside = path == "inside"
        src, dst, link = ("r1", "r2", exp.links[1]) if inside else ("r3", "r4", exp.lans[0])
        address = link.port(dst).ip
        channel = sim.SimChannel(directory)
        try:
            tag = f"{pps}-{time.monotonic_ns()}"
            recv_out, send_out = tmp / f"recv{tag}.json", tmp / f"send{tag}.json"
            channel.request("udp-recv", f"r{tag}", dst, 9001, sim.word(tmp / "log.csv"),
                            sim.word(recv_out))  # fmt: skip
            channel.request("udp-send", f"s{tag}", src, address, 9001, RATE_PAYLOAD,
                            repr(1 / pps), count, sim.word(send_out))  # fmt: skip
            while not channel.request("state", f"s{tag}")["done"]:
                time.sleep(0.2)
            time.sleep(0.5)
            channel.request("stop", f"r{tag}")
        finally:
            channel.close()
        received = json.loads(recv_out.read_text())["unique"]
    lags = lag_since(log, offset)
    return {
        "received": received / count,
        "cpu_us_per_packet": (process_cpu_s(pid) - cpu_before) / count * 1e6,
        "worst_lag_s": max(lags, default=0.0),
        "late_seconds": sum(1 for lag_s in lags if lag_s > simplan.DEFAULT_HARD_LIMIT_S),
        "seconds": len(lags),
        "steal": steal_share(before, cpu_times()),
        "load": load,
    }


def _median_row(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _rate_line(pps: int, row: dict) -> str:
    return (f"{pps:>7}{row['received'] * 100:>12.3f}{row['cpu_us_per_packet']:>16.1f}"
            f"{row['worst_lag_s'] * 1e3:>14.1f}{row['late_seconds']:>7g} of {row['seconds']:<3g}"
            f"{row['steal'] * 100:>9.2f}{row['load']:>6.1f}")  # fmt: skip


def _sustained(row: dict) -> bool:
    """The bench's criterion: at least 99.9 % received and no second over the hard limit."""
    return row["received"] >= 0.999 and row["late_seconds"] == 0


def rate_table() -> None:
    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    exp = rate_experiment()
    p = plan(exp)
    linux.swap_in(p)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for path in ("live", "inside", "lan"):
                what = {"live": "h1 to h2 through r1 and r2",
                        "inside": "r1 to r2, inside the simulation",
                        "lan": "r3 to r4 across a 2 ms simulated LAN, inside the simulation",
                        }[path]  # fmt: skip
                print(f"\npacket rate, {what}: 64-byte frames, {RATE_SECONDS} s each, "
                      f"median of 3 runs")  # fmt: skip
                print(f"{'pps':>7}{'received %':>12}{'sim CPU µs/pkt':>16}{'worst lag ms':>14}"
                      f"{'s over 5 ms':>13}{'steal %':>9}{'load':>6}")  # fmt: skip
                sustained = 0
                for pps in RATES_PPS:
                    row = _median_row([rate_once(p, exp, path, pps, Path(tmp)) for _ in range(3)])
                    print(_rate_line(pps, row))
                    if _sustained(row):
                        sustained = pps
                    if row["received"] < 0.9 or row["worst_lag_s"] > 1.0:
                        break  # far past what it sustains
                print(f"sustained (>= 99.9 % received, no second over 5 ms): {sustained} pps")
    finally:
        linux.swap_out(p)


def rate_versus(old: str) -> None:
    """The through path of ``rate_table``, nestbed-sim binary OLD against this checkout's (or
    $NESTBED_SIM), each in an experiment of its own swapped in side by side, their runs
    alternating at each rate so that both meet the same machine."""
    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    binaries = {"old": old, "new": built_binary("nestbed-sim")}
    exp = rate_experiment()
    chosen = os.environ.get("NESTBED_SIM")
    swapped = {}
    try:
        for label, binary in binaries.items():
            os.environ["NESTBED_SIM"] = binary
            e = exp.model_copy(update={"name": f"{exp.name}{label}"})
            p = plan(e)
            linux.swap_in(p)
            swapped[label] = (p, e)
        print(f"\npacket rate, h1 to h2 through r1 and r2: 64-byte frames, {RATE_SECONDS} s each, "
              f"median of 3 runs a binary, alternating")  # fmt: skip
        for label, binary in binaries.items():
            print(f"  {label}: {binary}")
        print(f"{'binary':>7}{'pps':>7}{'received %':>12}{'sim CPU µs/pkt':>16}"
              f"{'worst lag ms':>14}{'s over 5 ms':>13}{'steal %':>9}{'load':>6}")  # fmt: skip
        sustained = dict.fromkeys(binaries, 0)
        with tempfile.TemporaryDirectory() as tmp:
            for pps in RATES_PPS:
                runs: dict[str, list[dict]] = {label: [] for label in binaries}
                for _ in range(3):
                    for label, (p, e) in swapped.items():
                        runs[label].append(rate_once(p, e, "live", pps, Path(tmp)))
                rows = {label: _median_row(r) for label, r in runs.items()}
                for label, row in rows.items():
                    print(f"{label:>7}{_rate_line(pps, row)}")
                    if _sustained(row):
                        sustained[label] = pps
                if all(row["worst_lag_s"] > 1.0 for row in rows.values()):
                    break  # far past what either sustains
        for label, pps in sustained.items():
            print(f"{label}: sustained (>= 99.9 % received, no second over 5 ms): {pps} pps")
    finally:
        for p, _ in swapped.values():
            linux.swap_out(p)
        if chosen is None:
            os.environ.pop("NESTBED_SIM", None)
        else:
            os.environ["NESTBED_SIM"] = chosen


WAIT_DELAY_MS = 5
WAIT_COUNT, WAIT_PPS = 2000, 1000


def wait_once(binary: str, tmp: Path) -> tuple[list[float], dict]:
    """WAIT_COUNT datagrams at WAIT_PPS from h1 to h2 across a simulated core of
    WAIT_DELAY_MS, in nestbed-sim BINARY: each one's one-way delay less the core's (µs; the
    receiver's kernel times), and nestbed-sim's waits (none from a binary without them)."""
    from nestbed.backend import linux
    from nestbed.backend.plan import plan
    from nestbed.binaries import KERNEL_TIMES

    text = f"""
routing: static
nodes: [{{name: h1}}, {{name: h2}}, {{name: r1, simulated: true}}, {{name: r2, simulated: true}}]
links:
  - {{name: a1, members: [h1, r1]}}
  - {{name: core, members: [r1, r2], delay: {WAIT_DELAY_MS}ms}}
  - {{name: a2, members: [r2, h2]}}
"""
    document, locations = yaml_front_end.read(text, "wait.yaml")
    exp = resolve(document, file="wait.yaml", locations=locations)
    exp = exp.model_copy(update={"name": f"benchwait{os.getpid()}"})
    os.environ["NESTBED_SIM"] = binary
    p = plan(exp)
    linux.swap_in(p)
    try:
        warm = ["ping", "-c", "5", "-i", "0.05", "h2"]
        linux.exec_in(p, "h1", warm, capture_output=True)
        address = exp.links[2].port("h2").ip
        log = tmp / "wait.csv"
        receiver = linux.start_in(
            p, "h2", probe_recv(f"{address}:9000", "--idle", "2", "--log", str(log),
                                KERNEL_TIMES),
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        linux.wait_listening(receiver, 9000, "udp")
        linux.exec_in(
            p, "h1", probe_send(f"{address}:9000", "--size", str(RATE_PAYLOAD), "--pps",
                                str(WAIT_PPS), "--count", str(WAIT_COUNT)),
            capture_output=True,
        )  # fmt: skip
        receiver.wait(timeout=60)
        channel = sim.SimChannel(linux.run_dir(p))
        try:
            waits = channel.request("waits")["waits"]
        except NestbedError:
            waits = {}
        finally:
            channel.close()
    finally:
        linux.swap_out(p)
    with log.open() as f:
        extra = [int(r["delay_ns"]) / 1e3 - WAIT_DELAY_MS * 1e3 for r in csv.DictReader(f)]
    return sorted(extra), waits


def wait_table(old: str | None) -> None:
    """One-way delays across a simulated 5 ms link less the 5 ms, this checkout's nestbed-sim
    (or $NESTBED_SIM) against OLD if given, alternating, 3 runs each."""
    binaries = {"new": built_binary("nestbed-sim")} | ({"old": old} if old else {})
    chosen = os.environ.get("NESTBED_SIM")
    print(f"\none-way delay h1 to h2 across a simulated {WAIT_DELAY_MS} ms link, less the "
          f"{WAIT_DELAY_MS} ms: {WAIT_COUNT} datagrams at {WAIT_PPS}/s, kernel-timed, "
          "µs")  # fmt: skip
    for label, binary in binaries.items():
        print(f"  {label}: {binary}")
    print(f"{'binary':>7}{'min':>9}{'p50':>9}{'p90':>9}{'p99':>9}{'wait p50':>10}"
          f"{'given up':>10}{'out late p50':>14}{'load':>6}")  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(3):
                for label, binary in binaries.items():
                    extra, waits = wait_once(binary, Path(tmp))
                    q = [extra[int(f * (len(extra) - 1))] for f in (0.0, 0.5, 0.9, 0.99)]
                    if waits:
                        frames = max(1, waits["wait"]["count"])
                        seen = (f"{waits['wait']['p50_ns'] / 1e3:>10.0f}"
                                f"{waits['given_up_ns'] / frames / 1e3:>10.1f}"
                                f"{waits['out_late']['p50_ns'] / 1e3:>14.0f}")  # fmt: skip
                    else:
                        seen = f"{'-':>10}{'-':>10}{'-':>14}"
                    print(f"{label:>7}" + "".join(f"{x:>9.1f}" for x in q)
                          + f"{seen}{os.getloadavg()[0]:>6.1f}")  # fmt: skip
    finally:
        if chosen is None:
            os.environ.pop("NESTBED_SIM", None)
        else:
            os.environ["NESTBED_SIM"] = chosen


SECTIONS = {"startup": False, "example": True, "scale": True, "rate": True}  # needs root?


def main() -> None:
    """Every section, or those named on the command line (startup, example, scale, rate);
    `rate --versus OLD_BINARY` compares the through path with another nestbed-sim, and
    `wait [--versus OLD_BINARY]` measures the delay a simulated link adds to its own."""
    args = sys.argv[1:]
    if args[:1] == ["wait"] or "--versus" in args:
        at = args.index("--versus") if "--versus" in args else len(args)
        section = args[:at] + args[at + 2 :]
        if section not in (["rate"], ["wait"]) or len(args) == at + 1:
            sys.exit("usage: bench/hybrid.py rate|wait [--versus OLD_NESTBED_SIM]")
        if os.geteuid() != 0:
            sys.exit(f"{section[0]} needs root")
        old = args[at + 1] if at < len(args) else None
        if section == ["wait"]:
            wait_table(old)
        elif old is None:
            rate_table()
        else:
            rate_versus(old)
        return
    chosen = args or list(SECTIONS)
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        sys.exit(f"no section {', '.join(sorted(unknown))}; sections: {', '.join(SECTIONS)}")
    run = {"startup": startup_table, "example": across_example, "scale": scale_table,
           "rate": rate_table}  # fmt: skip
    for name in chosen:
        if SECTIONS[name] and os.geteuid() != 0:
            print(f"\n({name}: needs root)")
            continue
        run[name]()


if __name__ == "__main__":
    main()
