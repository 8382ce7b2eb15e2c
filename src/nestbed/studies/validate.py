"""`nestbed validate`: the accuracy of nestbed-linkd, measured as in the Netbed paper (§6.1).

Two nodes joined by one emulated link; nestbed-probe sends UDP between them while the link's
parameters are changed between measurements. Delay (Table 1) is the round trip of echoed
packets and the one-way delay on the hosts' shared monotonic clock, arrivals timed by the
kernel's receive time (so a probe waiting for a core does not count as the link's delay),
beside linkd's own lateness over the same packets; bandwidth (Table 2) is the
receiver's goodput on the wire while the sender offers slightly more into a queue of 20 ms,
both on packet rings (``RING_DST_MAC``); loss (Table 3) is the
received proportion against a 99 % binomial interval; Gilbert-Elliott loss and jitter are
checked too. Nothing is adjusted after the fact. The paper's Dummynet figures are printed
beside ours.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nestbed.api import Experiment
from nestbed.backend import get as get_backend
from nestbed.backend.linkd import Channel
from nestbed.backend.plan import Plan, plan
from nestbed.binaries import KERNEL_TIMES, probe_recv, probe_send
from nestbed.errors import InternalError
from nestbed.lifecycle import Active, Testbed, signals
from nestbed.model.options import RunOptions
from nestbed.store import Store

# The bandwidth rows' generator and counter: nestbed-probe on packet rings, a batch of frames
# per system call at the sender and none per frame at the receiver, so neither end's UDP stack
# is the bottleneck at 150 000 frames/s on two cores. The frames go to a MAC no node has: the
# receiving node's IP stack drops them on arrival, after its ring has counted them. linkd
# forwards and shapes them as any frame (a link of two ports sends every frame across).
RING_DST_MAC = "02:6e:62:00:00:01"
# The link's queue while its rate is measured: 20 ms of the rate, and at least linkd's default
# of 50 frames. Offered 5 % more than the rate, the queue stays full, and a pause of the
# generator shorter than that (a wait for a core on a busy machine: then it sends what fell
# due at once) leaves the link busy: the row measures the shaping, not the generator's pauses,
# which with 50 frames (0.34 ms at 148 800 frames/s) idled the link by 1-2 %.
QUEUE_S = 0.02
QUEUE_MIN_PACKETS = 50
# Ethernet frame sizes of the paper (with FCS) and the UDP payload that makes them.
FRAME_SIZES = {64: 18, 1518: 1472}
PORT = 5001

# The paper's Dummynet figures (Tables 1-3), quoted for comparison.
DUMMYNET_RTT_MS = {
    (0, 64): 0.177, (0, 1518): 1.225, (5, 64): 10.183, (5, 1518): 11.187,
    (10, 64): 20.190, (10, 1518): 21.185, (50, 64): 100.185, (50, 1518): 101.169,
    (300, 64): 600.126, (300, 1518): 600.953,
}  # fmt: skip
DUMMYNET_BW_ERR = {
    (56_000, 64): 0.11, (56_000, 1518): 1.89, (384_000, 64): 0.05, (384_000, 1518): 0.34,
    (1_544_000, 64): 0.04, (1_544_000, 1518): 0.11, (10_000_000, 64): 0.04,
    (10_000_000, 1518): 0.05, (45_000_000, 1518): 0.04,
}  # fmt: skip
DUMMYNET_LOSS_ERR = {
    (0.008, 64): 0.2, (0.008, 1518): 0.3, (0.025, 64): 0.4, (0.025, 1518): 1.1,
    (0.12, 64): 0.4, (0.12, 1518): 0.7,
}  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """How much to measure; ``quick()`` is the short version."""

    delays_ms: tuple[float, ...] = (0, 5, 10, 50, 300)
    bandwidths_bps: tuple[int, ...] = (
        56_000, 384_000, 1_544_000, 10_000_000, 45_000_000, 100_000_000, 1_000_000_000,
    )  # fmt: skip
    losses: tuple[float, ...] = (0.008, 0.025, 0.12)
    sizes: tuple[int, ...] = (64, 1518)
    delay_packets: int = 5000
    pps: dict[int, int] = field(default_factory=lambda: {64: 10_000, 1518: 5_000})
    bandwidth_seconds: float = 5.0
    bandwidth_min_packets: int = 200
    loss_packets: int = 100_000
    gilbert: tuple[tuple[float, float], ...] = ((0.05, 4.0), (0.01, 2.0))
    gilbert_packets: int = 200_000
    jitter_ms: tuple[tuple[float, float], ...] = ((10, 2), (50, 10))

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            delays_ms=(0, 5, 50),
            bandwidths_bps=(384_000, 10_000_000, 100_000_000),
            losses=(0.025, 0.12),
            delay_packets=1000,
            bandwidth_seconds=2.0,
            bandwidth_min_packets=60,
            loss_packets=20_000,
            gilbert=((0.05, 4.0),),
            gilbert_packets=40_000,
            jitter_ms=((10, 2),),
        )


def own_name(kind: str) -> str:
    """An instrument's experiment name of this process's own: the names of namespaces and
    links derive from it, so two instruments running at once must not share one."""
    return f"{kind}-{os.getpid()}"


class Bench:
    """A swapped-in two-node experiment whose one link is changed between measurements.

    It is an experiment like any other (a store of its own in the work folder, swapped in
    and out through the life cycle, with a controller); ``through_linkd=False`` makes its
    link a plain cable, the baseline linkd is compared with.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        through_linkd: bool = True,
        name: str | None = None,
        bandwidth: str = "1Gb",
        backend: str | None = None,
    ) -> None:
        exp = Experiment(name or own_name("validate"))
        s, r = exp.node("s"), exp.node("r")
        # A rate puts the link through linkd; set_link replaces it. Up to 1 Gb/s its
        # interfaces have offloads off (plan.keeps_offloads), as validate's rows need: frames
        # of their own sizes, read through linkd's packet rings.
        exp.link(s, r, name="link0", **({"bandwidth": bandwidth} if through_linkd else {}))
        self.ir = exp.build()
        self.plan: Plan = plan(self.ir)
        self.workdir = workdir
        self.receiver_ip = self.ir.links[0].port("r").ip
        self.backend = backend  # None: the environment's (a cluster, with NESTBED_CLUSTER)
        self.client: Channel | None = None
        self.store: Store | None = None
        self.active: Active | None = None

    def __enter__(self) -> Bench:
        self.store = Store.open(str(self.workdir / "store.db"))
        testbed = Testbed(self.store, get_backend(self.backend))
        try:
            testbed.define(self.ir, anew=True)
            options = RunOptions(results=self.workdir / "run", report=False)
            self.active = testbed.swap_in(self.ir.name, options)
            backend = self.active.backend
            self.client = backend.linkd(self.plan) if self.plan.needs_linkd else None
            # Resolve ARP now, while the link is fast: a first packet waiting for ARP across a
            # long delay (and the packets dropped behind it) would be counted against the link.
            for src, dst in (("s", "r"), ("r", "s")):
                self.active.exec(src, ["ping", "-c", "1", "-W", "2", dst], capture_output=True)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None = None, exc: object = None, *_: object
    ) -> None:
        if self.client:
            self.client.close()
        # A bench stopped by Ctrl-C, SIGTERM or SIGHUP says so in its run's manifest, as a run
        # does; one that failed says failed.
        outcome = "completed"
        if isinstance(exc, KeyboardInterrupt):
            outcome = signals.outcome(exc)
        elif exc is not None:
            outcome = "failed"
        if self.store is not None:
            try:
                if self.active is not None:
                    Testbed(self.store, self.active.backend).swap_out(self.ir.name, outcome=outcome)
            finally:
                self.store.close()

    def set_link(self, params: dict[str, Any]) -> None:
        """Both directions of the link get ``params`` (nestbed-pipe's PipeParams)."""
        assert self.client is not None
        for port in ("s", "r"):
            self.client.request("set", link="link0", port=port, direction="egress", params=params)

    def rings(self) -> tuple[list[str], list[str]]:
        """nestbed-probe's options that send from s and count at r on packet rings, on
        their interfaces on the link."""
        interfaces = self.plan.interfaces()
        return (
            ["--ring", interfaces[("link0", "s")], "--dst-mac", RING_DST_MAC],
            ["--ring", interfaces[("link0", "r")]],
        )

    def counters(self) -> dict[str, Any]:
        assert self.client is not None
        return self.client.request("counters", link="link0")

    def probe(
        self, send: list[str], recv: list[str], *, log: bool = False
    ) -> tuple[dict, dict, Path | None]:
        """Runs a receiver in r and a sender in s; returns both JSON summaries (and r's log)."""
        assert self.active is not None
        log_path = self.workdir / "recv.csv" if log else None
        logged = ["--log", str(log_path)] if log_path else []
        receiver = self.active.start(
            "r",
            probe_recv(f"{self.receiver_ip}:{PORT}", *recv, *logged),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(0.2)  # the receiver binds before the first packet
            sender = self.active.exec(
                "s",
                probe_send(f"{self.receiver_ip}:{PORT}", *send),
                capture_output=True,
                text=True,
                timeout=600,
            )
            out, err = receiver.communicate(timeout=600)
        finally:
            if receiver.poll() is None:
                receiver.kill()
                receiver.wait()
        if sender.returncode != 0 or receiver.returncode != 0:
            raise InternalError(
                f"nestbed-probe failed: sender {sender.returncode} {sender.stderr.strip()}; "
                f"receiver {receiver.returncode} {err.strip()}"
            )
        return json.loads(sender.stdout), json.loads(out), log_path


CAPACITY_SECONDS = 2.0
OFFERED_PPS = 2_000_000  # above what linkd carries on one thread (about 300 000 here)


def linkd_capacity(workdir: Path, seconds: float = CAPACITY_SECONDS) -> dict[str, Any]:
    """What this machine's nestbed-linkd carries: 64-byte frames offered through one link it
    shapes (far faster than it carries, so only linkd limits it) by a generator on packet
    rings, for ``seconds``, counted where they arrive. ``pps`` is the rate that arrived;
    ``limited_by`` says whether linkd (it dropped what it could not carry) or the generator
    (linkd kept up with all it sent: ``pps`` is then a lower bound) set it."""
    with Bench(workdir, name=own_name("capacity"), bandwidth="100Gb", backend="linux") as bench:
        send_ring, recv_ring = bench.rings()
        sent, got, _ = bench.probe(
            ["--size", str(FRAME_SIZES[64]), "--pps", str(OFFERED_PPS),
             "--duration", f"{seconds:g}", *send_ring],
            ["--idle", "1", *recv_ring],
        )  # fmt: skip
    sent_pps = float(sent.get("achieved_pps") or 0.0)
    pps = float((got.get("rate") or {}).get("pps") or 0.0)
    # Within 1 % of what was sent: linkd carried it all, the generator was the bound.
    limited_by = "generator" if pps >= 0.99 * sent_pps else "linkd"
    return {"pps": round(pps), "sent_pps": round(sent_pps), "frame_bytes": 64,
            "seconds": seconds, "limited_by": limited_by}  # fmt: skip


def _lateness_totals(counters: dict[str, Any]) -> tuple[float, float, float, float]:
    """linkd's frames, their summed lateness and its square (ns, ns²), and the frames at
    least 50 µs late, over all its threads, as counted so far."""
    frames = total = squares = late = 0.0
    for thread in counters.get("threads", []):
        h = thread["lateness"]
        if "sum_ns" not in h:  # a linkd older than its sums (NESTBED_LINKD): nothing to say
            continue
        frames += h["frames"]
        total += h["sum_ns"]
        squares += h["sum_sq_ns"]
        late += sum(h["buckets"][b] for b in ("lt_100us", "lt_1ms", "ge_1ms"))
    return frames, total, squares, late


def linkd_lateness(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """How late linkd sent the frames it sent between two counter reports: its own timing
    error (send time − due time) apart from the probes' and the hosts' scheduling, which the
    one-way figures include."""
    f0, s0, q0, l0 = _lateness_totals(before)
    f1, s1, q1, l1 = _lateness_totals(after)
    frames = f1 - f0
    if frames <= 0:
        return {
            "linkd_frames": 0, "linkd_late_mean_us": None, "linkd_late_stdev_us": None,
            "linkd_late_50us_pct": None,
        }  # fmt: skip
    mean = (s1 - s0) / frames
    variance = max((q1 - q0) / frames - mean * mean, 0.0)
    return {
        "linkd_frames": round(frames),
        "linkd_late_mean_us": mean / 1e3,
        "linkd_late_stdev_us": math.sqrt(variance) / 1e3,
        "linkd_late_50us_pct": 100 * (l1 - l0) / frames,
    }


def _pct(measured: float, expected: float) -> float | None:
    return abs(measured - expected) / expected * 100 if expected else None


def measure_delay(bench: Bench, s: Settings, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for delay_ms in s.delays_ms:
        bench.set_link({"delay": {"delay_ns": round(delay_ms * 1e6)}})
        for size in s.sizes:
            progress(f"delay {delay_ms} ms, {size}-byte frames")
            pps = s.pps[size]
            before = bench.counters() if bench.client else {}
            sent, got, _ = bench.probe(
                ["--size", str(FRAME_SIZES[size]), "--pps", str(pps),
                 "--count", str(s.delay_packets), "--echo-wait", str(1 + 2 * delay_ms / 1000),
                 KERNEL_TIMES],
                ["--echo", "--idle", str(2 + 2 * delay_ms / 1000), KERNEL_TIMES],
            )  # fmt: skip
            late = linkd_lateness(before, bench.counters() if bench.client else {})
            rtt = sent["echo"]["rtt"]
            one_way = got["delay"]
            expected_ns = 2 * delay_ms * 1e6
            rows.append(
                {
                    "delay_ms": delay_ms,
                    "frame_bytes": size,
                    "pps": pps,
                    "packets": sent["echo"]["received"],
                    "rtt_ms": rtt["mean_ns"] / 1e6,
                    "rtt_stdev_ms": rtt["stdev_ns"] / 1e6,
                    "rtt_median_ms": rtt["median_ns"] / 1e6,
                    "rtt_error_us": (rtt["mean_ns"] - expected_ns) / 1e3,
                    "rtt_error_pct": _pct(rtt["mean_ns"], expected_ns),
                    "one_way_error_us": (one_way["mean_ns"] - delay_ms * 1e6) / 1e3,
                    "one_way_stdev_us": one_way["stdev_ns"] / 1e3,
                    **late,
                    "dummynet_rtt_ms": DUMMYNET_RTT_MS.get((delay_ms, size)),
                }
            )
    return rows


def measure_bandwidth(bench: Bench, s: Settings, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for bps in s.bandwidths_bps:
        for size in s.sizes:
            progress(f"bandwidth {bps / 1000:g} kb/s, {size}-byte frames")
            wire_bits = (size - 4 + 24) * 8  # frame without FCS, plus the pipe's 24-byte overhead
            queue = max(QUEUE_MIN_PACKETS, math.ceil(bps * QUEUE_S / wire_bits))
            bench.set_link({"bandwidth": {"rate_bps": bps}, "queue": {"limit": {"packets": queue}}})
            seconds = max(s.bandwidth_seconds, s.bandwidth_min_packets * wire_bits / bps)
            offered = round(bps * 1.05)
            send_ring, recv_ring = bench.rings()
            sent, got, _ = bench.probe(
                ["--size", str(FRAME_SIZES[size]), "--rate", str(offered),
                 "--duration", f"{seconds:.3f}", *send_ring],
                ["--idle", str(2 + 3 * wire_bits / bps), *recv_ring],
            )  # fmt: skip
            measured = got["rate"]["wire_bps"]
            rows.append(
                {
                    "bandwidth_bps": bps,
                    "frame_bytes": size,
                    "offered_bps": offered,
                    "queue_packets": queue,
                    # What the generator put on the link (short of offered_bps if it fell
                    # behind), and what the receiver's ring could not keep.
                    "sent_bps": sent["achieved_wire_rate_bps"],
                    "receiver_drops": got["kernel_drops"],
                    "packets": got["packets"],
                    "measured_bps": measured,
                    "error_pct": _pct(measured, bps),
                    "dummynet_error_pct": DUMMYNET_BW_ERR.get((bps, size)),
                }
            )
    return rows


def wilson(k: int, n: int, z: float = 2.5758) -> tuple[float, float]:
    """The 99 % Wilson score interval of a binomial proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def measure_loss(bench: Bench, s: Settings, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for loss in s.losses:
        bench.set_link({"loss": {"model": "bernoulli", "p": loss}})
        for size in s.sizes:
            progress(f"loss {loss:.1%}, {size}-byte frames")
            sent, got, _ = bench.probe(
                ["--size", str(FRAME_SIZES[size]), "--pps", str(s.pps[size]),
                 "--count", str(s.loss_packets)],
                ["--idle", "2", "--expect", str(s.loss_packets)],
            )  # fmt: skip
            n = sent["packets_sent"]
            lost = n - got["unique"]
            low, high = wilson(lost, n)
            rows.append(
                {
                    "loss": loss,
                    "frame_bytes": size,
                    "packets": n,
                    "measured_loss": lost / n,
                    "receiver_socket_drops": got.get("kernel_drops"),
                    "interval_99": [low, high],
                    "inside": low <= loss <= high,
                    "error_pct": _pct(lost / n, loss),
                    "dummynet_error_pct": DUMMYNET_LOSS_ERR.get((loss, size)),
                }
            )
    return rows


def loss_bursts(log: Path, count: int) -> tuple[float, float]:
    """Loss rate and mean burst length (runs of consecutive lost sequence numbers)."""
    received = bytearray(count)
    with log.open() as f:
        for row in csv.DictReader(f):
            seq = int(row["seq"])
            if seq < count:
                received[seq] = 1
    bursts, lost, run = [], 0, 0
    for got in received:
        if got:
            if run:
                bursts.append(run)
            run = 0
        else:
            lost += 1
            run += 1
    if run:
        bursts.append(run)
    return lost / count, (statistics.mean(bursts) if bursts else 0.0)


def measure_gilbert(bench: Bench, s: Settings, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for rate, burst in s.gilbert:
        progress(f"Gilbert-Elliott loss {rate:.0%}, bursts of {burst:g}")
        q = 1 / burst
        bench.set_link(
            {
                "loss": {
                    "model": "gilbert_elliott",
                    "p": rate * q / (1 - rate),
                    "r": q,
                    "loss_in_bad": 1.0,
                    "loss_in_good": 0.0,
                }
            }
        )
        _, _, log = bench.probe(
            ["--size", "18", "--pps", str(s.pps[64]), "--count", str(s.gilbert_packets)],
            ["--idle", "2", "--expect", str(s.gilbert_packets)],
            log=True,
        )
        assert log is not None
        measured_rate, measured_burst = loss_bursts(log, s.gilbert_packets)
        rows.append(
            {
                "loss_rate": rate,
                "burst_length": burst,
                "packets": s.gilbert_packets,
                "measured_loss_rate": measured_rate,
                "measured_burst_length": measured_burst,
                "loss_rate_error_pct": _pct(measured_rate, rate),
                "burst_length_error_pct": _pct(measured_burst, burst),
            }
        )
    return rows


def measure_jitter(bench: Bench, s: Settings, progress: Callable[[str], None]) -> list[dict]:
    """Each jitter setting twice: in order (the default: a packet never overtakes the one
    before, which narrows the distribution and moves it up when jitter exceeds the spacing)
    and with reordering, where every packet gets exactly the configured distribution."""
    rows = []
    for delay_ms, jitter_ms in s.jitter_ms:
        for reorder in (False, True):
            order = "reordering" if reorder else "in order"
            progress(f"jitter {delay_ms} ms ± {jitter_ms} ms uniform, {order}")
            bench.set_link(
                {
                    "delay": {
                        "delay_ns": round(delay_ms * 1e6),
                        "jitter_ns": round(jitter_ms * 1e6),
                        "distribution": "uniform",
                        "reorder": reorder,
                    }
                }
            )
            _, got, _ = bench.probe(
                ["--size", "18", "--pps", "2000", "--count", str(s.delay_packets)],
                ["--idle", str(2 + delay_ms / 500), KERNEL_TIMES],
            )
            d = got["delay"]
            rows.append(
                {
                    "delay_ms": delay_ms,
                    "jitter_ms": jitter_ms,
                    "reorder": reorder,
                    "packets": got["packets"],
                    "mean_ms": d["mean_ns"] / 1e6,
                    "median_ms": d["median_ns"] / 1e6,
                    "stdev_ms": d["stdev_ns"] / 1e6,
                    "uniform_stdev_ms": jitter_ms / math.sqrt(3),
                    "min_ms": d["min_ns"] / 1e6,
                    "max_ms": d["max_ns"] / 1e6,
                    "reordered": got["reordered"],
                }
            )
    return rows


def run(settings: Settings, results: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    """Measures everything, writes the results folder, returns the tables."""
    get_backend().require_ready()
    results.mkdir(parents=True, exist_ok=True)
    tables: dict[str, Any] = {"settings": asdict(settings)}
    with Bench(results) as bench:
        for name, measure in (
            ("delay", measure_delay),
            ("bandwidth", measure_bandwidth),
            ("loss", measure_loss),
            ("gilbert_elliott", measure_gilbert),
            ("jitter", measure_jitter),
        ):
            tables[name] = measure(bench, settings, progress)
            _write_csv(results / f"{name}.csv", tables[name])
        tables["linkd_counters"] = bench.counters()
    (results / "validate.json").write_text(json.dumps(tables, indent=2) + "\n")
    return tables


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
