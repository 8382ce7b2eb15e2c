"""Runs linktest on a swapped-in experiment: nestbed-probe between the nodes for latency, loss
and bandwidth, datagrams from inside every node's namespace for routing; tests in rounds where
each node takes part in one test at a time. Level N runs levels 1 to N, as in Emulab."""

from __future__ import annotations

import collections
import contextlib
import csv
import fcntl
import json
import math
import select
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nestbed.backend import get as get_backend
from nestbed.backend.base import Backend
from nestbed.backend.linkd import Pipe, drops_by_kind, pipe_counters
from nestbed.backend.plan import Plan
from nestbed.binaries import KERNEL_TIMES, probe_recv, probe_send
from nestbed.linktest import expect, stats
from nestbed.linktest.expect import Direction, Route
from nestbed.linktest.levels import LEVELS, Notify, check_level
from nestbed.linktest.simulated import SimulatedProbe, SimulatedProbes
from nestbed.model import Experiment
from nestbed.results import markdown as md
from nestbed.results.folder import RunFolder

LATENCY_PROBES = 40
LATENCY_PAYLOAD = 64
LOSS_PAYLOAD = 64
LOSS_MAX_PPS = 10_000
# Of a shaped direction's rate: probes are paced evenly, so below the rate no queue builds.
LOSS_MAX_UTILIZATION = 0.5
LOSS_ROUND_PPS = 40_000  # summed rate of a round's loss tests: well within linkd's capacity
BANDWIDTH_SECONDS = 2.0
BANDWIDTH_OVERDRIVE = 1.05
BANDWIDTH_MIN_PACKETS = 200
BANDWIDTH_ROUND_LOAD_BPS = 400e6
BLOCK_SECONDS = 0.02  # goodput is taken per block of arrivals at least this long
BLOCK_MIN_FRAMES = 20  # summed offered load of a round, so linkd keeps up
ROUTING_PORT = 39_999
# Datagrams a second of a routing pass, all pairs together: thousands sent at once overflow
# the queues of the links most paths share (a 100-node tree's root link carries a quarter
# of them; 50 frames of queue at 100 Mb/s last 0.3 ms), as soon as a busy host leaves its
# link emulator unscheduled for a few milliseconds. 9 702 pairs take a second.
ROUTING_PPS = 10_000
WARM_UP_ATTEMPTS = 6
ARP_RETRY_S = 1.1  # the kernel asks again after net.ipv4.neigh.*.retrans_time_ms (1 s)
FIRST_PORT = 40_000
# A receiver's own idle timer counts from its start until a first datagram arrives; the
# senders of its round start after every receiver of the round was heard listening, which on
# a cluster (commands started and heard through the scheduler) has taken over a second. So a
# receiver's own timer is only a safety net this much longer than its linger, and linktest
# ends it itself once its round's senders are done and the linger has passed.
RECEIVER_START_S = 30.0
_MEASURES = ("measured", "mean", "median", "lost", "sent")  # what a second measurement keeps


@dataclass
class Check:
    """One row of the report."""

    level: int
    link: str  # the link or LAN; for routing, the path's links
    direction: str
    expected: str
    measured: str
    verdict: str  # pass, fail or skip
    reason: str = ""
    numbers: dict[str, float | int | None] = field(default_factory=dict)


@dataclass
class Report:
    experiment: str
    level: int
    checks: list[Check]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    level_seconds: dict[int, float] = field(default_factory=dict)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "fail"]

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "level": self.level,
            "seconds": round(self.seconds, 2),
            "level_seconds": self.level_seconds,
            "alpha": stats.ALPHA,
            "passed": not self.failures,
            "counts": {
                v: sum(c.verdict == v for c in self.checks) for v in ("pass", "fail", "skip")
            },
            "notes": self.notes,
            "checks": [asdict(c) for c in self.checks],
        }


def set_aside(report: Report, links: Iterable[str]) -> None:
    """Turns the checks of links that events changed while linktest ran into skips: what they
    measured belongs to neither setting."""
    changed = set(links)
    if not changed:
        return
    for c in report.checks:
        if c.verdict != "skip" and changed & set(c.link.split()):
            c.verdict = "skip"
            c.reason = "an event changed the link during the test; " + (c.reason or "measured")
    report.notes.append(f"events changed {', '.join(sorted(changed))} during the test")


def linktest(
    plan: Plan,
    exp: Experiment,
    level: int = 3,
    *,
    down: Iterable[str] = (),
    progress: Notify | None = None,
    backend: Backend | None = None,
) -> Report:
    """Runs levels 1..``level`` on the live experiment ``plan`` built from ``exp`` (with any
    link changes events made since) on ``backend`` (default: the default back end);
    ``down`` are links an event took down."""
    check_level(level)
    say = progress or (lambda _: None)
    backend = backend or get_backend()
    with _exclusive(backend.run_dir(plan), say):
        return _linktest(backend, plan, exp, level, set(down), say)


@contextlib.contextmanager
def _exclusive(directory: Path, say: Notify) -> Iterator[None]:
    """One linktest at a time per experiment: two would use the same ports in the same nodes
    and load each other's links."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (directory / "linktest.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("waiting for another linktest of this experiment to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _linktest(
    backend: Backend, plan: Plan, exp: Experiment, level: int, down: set[str], say: Notify
) -> Report:
    started = time.monotonic()
    report = Report(exp.name, level, [])
    with contextlib.closing(_Tester(backend, plan, report)) as tester:
        _levels(tester, plan, exp, level, down, say)
    report.seconds = time.monotonic() - started
    return report


def _levels(
    tester: _Tester, plan: Plan, exp: Experiment, level: int, down: set[str], say: Notify
) -> None:
    report = tester.report
    # Simulated nodes (make-simulated) run their probes in nestbed-sim (linktest.simulated);
    # they have no sockets of their own for level 2's datagrams, so their routes are tested
    # as parts of the routes between emulated nodes that cross them.
    simulated = set(plan.simulation.nodes) if plan.simulation else set()
    directions = expect.directions(exp, down)
    if simulated:
        say(f"simulated nodes {', '.join(sorted(simulated))} probe from nestbed-sim")
    clock = _Clock(report)
    say(f"level 1: {LEVELS[1]} of {len(directions)} directions")
    tester.warm_up(directions)
    tester.latency(directions)
    clock.lap(1)
    if level >= 2:
        tables = {n.name: [(r.destination, r.via) for r in n.routes] for n in plan.nodes}
        forwarding = {n.name for n in plan.nodes if n.sysctls.get("net.ipv4.ip_forward") == "1"}
        if plan.simulation:
            tables |= plan.simulation.tables()
            forwarding |= simulated
        found = [
            r for r in expect.routes(exp, tables, forwarding, down)
            if not {r.src, r.dst} & simulated
        ]  # fmt: skip
        say(f"level 2: {LEVELS[2]} of {len(found)} node pairs")
        tester.routing(found)
        clock.lap(2)
    if level >= 3:
        say(f"level 3: {LEVELS[3]} of {len(directions)} directions")
        tester.loss(directions)
        clock.lap(3)
    if level >= 4:
        shaped = [d for d in directions if d.rate_bps and not d.down]
        say(f"level 4: {LEVELS[4]} of {len(shaped)} shaped directions")
        tester.bandwidth(shaped)
        clock.lap(4)


class _Clock:
    def __init__(self, report: Report):
        self.report, self.last = report, time.monotonic()

    def lap(self, level: int) -> None:
        now = time.monotonic()
        self.report.level_seconds[level] = round(now - self.last, 2)
        self.last = now


@dataclass
class _Probe:
    """One nestbed-probe test: a receiver in ``dst`` and a sender in ``src``."""

    src: str
    dst: str
    dst_ip: str
    src_ip: str
    send: list[str]  # arguments after `send --to IP:PORT --bind IP`
    recv: list[str]  # arguments after `recv --bind IP:PORT`
    sent: dict[str, Any] | None = None
    received: dict[str, Any] | None = None
    link: str | None = None  # given: count the drops of its queues (src egress, dst ingress)
    queue_drops: int = 0
    linger_s: float | None = None  # given: the receiver waits this long after its sender ends


class _Tester:
    def __init__(self, backend: Backend, plan: Plan, report: Report):
        self.backend, self.plan, self.report = backend, plan, report
        self.simulated = SimulatedProbes(plan, backend, expect.wire_bits)

    def close(self) -> None:
        self.simulated.close()

    def add(self, level: int, d: Direction | Route, **fields: Any) -> None:
        self.report.checks.append(self.check(level, d, **fields))

    @staticmethod
    def check(level: int, d: Direction | Route, **fields: Any) -> Check:
        link = d.link if isinstance(d, Direction) else " ".join(h.link for h in d.hops) or "-"
        return Check(level, link, d.label, **fields)

    # -- nestbed-probe rounds ------------------------------------------------------------

    def run_probes(self, probes: Sequence[_Probe], load_bps: Sequence[float] = (),
                   max_load_bps: float = math.inf) -> None:  # fmt: skip
        """Runs the probes in rounds; fills in each one's ``sent`` and ``received`` summaries."""
        users = [(p.src, p.dst) for p in probes]
        for members in expect.rounds(users, load_bps, max_load_bps):
            self._round([probes[i] for i in members])

    def _round(self, probes: Sequence[_Probe]) -> None:
        receivers: list[subprocess.Popen] = []
        senders: list[subprocess.Popen] = []
        # No node is in two tests of a round, so each queue counted here serves one test.
        queues = [(p, ((p.link, p.src, "egress"), (p.link, p.dst, "ingress")))
                  for p in probes if p.link]  # fmt: skip
        before = self._queue_drops() if queues else {}
        try:
            for k, p in enumerate(probes):
                port = FIRST_PORT + k
                receivers.append(self._start(p.dst, probe_recv(f"{p.dst_ip}:{port}", *p.recv)))
            # No sender starts before its receiver listens, or its first datagrams meet a
            # closed port and count as the link's loss. Every back end's command is waited
            # for (a cluster's is no Popen, but its own proxy of one); nestbed-sim's probes
            # listen as it replies to their start.
            for k, r in enumerate(receivers):
                if not isinstance(r, SimulatedProbe):
                    self.backend.wait_listening(r, FIRST_PORT + k, "udp")
            for k, p in enumerate(probes):
                to = f"{p.dst_ip}:{FIRST_PORT + k}"
                senders.append(self._start(p.src, probe_send(to, "--bind", p.src_ip, *p.send)))
            for p, s in zip(probes, senders, strict=True):
                p.sent = _summary(s)
            _linger(probes, receivers)
            for p, r in zip(probes, receivers, strict=True):
                p.received = _summary(r)
            after = self._queue_drops() if queues else {}
            for p, pipes in queues:
                p.queue_drops = sum(after.get(q, 0) - before.get(q, 0) for q in pipes)
        finally:
            for process in receivers + senders:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    def _queue_drops(self) -> dict[Pipe, int]:
        """Drops by the queues of linkd's pipes and of the simulated links so far; none of
        either if it does not answer."""
        counters: dict[Pipe, dict[str, Any]] = {}
        with contextlib.suppress(OSError):
            client = self.backend.linkd(self.plan)
            try:
                counters |= pipe_counters(client)
            finally:
                client.close()
        if self.simulated.nodes:
            with contextlib.suppress(OSError):
                counters |= self.simulated.counters()
        return {pipe: drops_by_kind(c)["queue"] for pipe, c in counters.items()}

    def _start(self, node: str, argv: list[str]) -> subprocess.Popen | SimulatedProbe:
        if node in self.simulated.nodes:
            return self.simulated.start(node, argv)
        return self.backend.start_in(
            self.plan, node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    # -- level 1 -------------------------------------------------------------------------

    def warm_up(self, directions: Sequence[Direction]) -> None:
        """Datagrams along every direction until one arrives, so each node has its
        neighbours' addresses resolved (ARP) before delays are measured: the kernel holds
        packets while it asks, which would add a round trip, or a second when a lossy link
        lost the question, to the first probes."""
        live = [d for d in directions if not d.down]
        inside = [d for d in live if {d.src, d.dst} & self.simulated.nodes]
        if inside:
            self._warm_up_simulated(inside)
        live = [d for d in live if d not in inside]
        if not live:
            return
        wait = 0.3 + 3 * max(d.delay_s(16) + d.jitter_s for d in live)
        nodes = {d.src for d in live} | {d.dst for d in live}
        with _Datagrams(self.backend, self.plan, nodes) as datagrams:
            for attempt in range(WARM_UP_ATTEMPTS):
                due = [i for i, _ in enumerate(live) if not datagrams.got[i]]
                if not due:
                    return
                for i in due:
                    datagrams.send(live[i].src, live[i].dst_ip, i)
                # After a first try, what is missing waits for the kernel's next ARP request.
                datagrams.collect(wait=wait if attempt == 0 else max(wait, ARP_RETRY_S))

    def _warm_up_simulated(self, directions: Sequence[Direction]) -> None:
        """A few probes along each direction with a simulated end, received or not, so
        that addresses are resolved before the probes are timed: nothing answers a datagram
        that finds no receiver in a simulated node, so no datagram is tried until one
        arrives."""
        probes = []
        for d in directions:
            wait = 0.3 + 3 * (d.delay_s(16) + d.jitter_s)
            send = ["--size", "16", "--count", "3", "--interval", "0.01"]
            probes.append(_Probe(d.src, d.dst, d.dst_ip, d.src_ip, send, [], linger_s=wait))
        self.run_probes(probes)

    def latency(self, directions: Sequence[Direction]) -> None:
        alpha = stats.per_test_alpha(len(directions))
        probes = [self._latency_probe(d) for d in directions]
        with self.simulated.lag() as lag:
            self.run_probes(probes)
        checks = [
            self._latency_check(d, p, alpha, self._lag_allowed(d, lag))
            for d, p in zip(directions, probes, strict=True)
        ]

        def alone(k: int) -> Check:
            again = self._latency_probe(directions[k])
            with self.simulated.lag() as lag:
                self._round([again])
            return self._latency_check(
                directions[k], again, alpha, self._lag_allowed(directions[k], lag)
            )

        self.report.checks.extend(
            self._confirmed(checks, alone, lambda c: bool(c.numbers.get("received")))
        )

    @staticmethod
    def _latency_probe(d: Direction) -> _Probe:
        serialization = d.delay_s(LATENCY_PAYLOAD) - sum(s.delay_s for s in d.stages)
        interval = max(0.005, 4 * serialization)
        # Stops at the last probe, or this long after the last that arrived.
        idle = 0.5 + 2 * (d.delay_s(LATENCY_PAYLOAD) + d.jitter_s) + 4 * interval
        send = ["--size", str(LATENCY_PAYLOAD), "--count", str(LATENCY_PROBES),
                "--interval", f"{interval:.6f}"]  # fmt: skip
        # The link's delay, not the receiving probe's wait for a core (KERNEL_TIMES).
        recv = ["--count", str(LATENCY_PROBES), "--idle", f"{idle + RECEIVER_START_S:.3f}",
                "--expect", str(LATENCY_PROBES), KERNEL_TIMES]  # fmt: skip
        return _Probe(d.src, d.dst, d.dst_ip, d.src_ip, send, recv, linger_s=idle)

    def _confirmed(self, checks: list[Check], alone: Callable[[int], Check],
                   measured: Callable[[Check], bool]) -> list[Check]:  # fmt: skip
        """A failed check that measured something is measured again, alone (``alone(k)``
        gives check k's new verdict), and the second verdict stands: a sender or receiver the
        busy host did not schedule for a while spoils one measurement; a wrong link, both."""
        out = list(checks)
        for k, was in enumerate(checks):
            if was.verdict != "fail" or not measured(was):
                continue
            now = alone(k)
            now.numbers |= {f"first_{key}": value for key, value in was.numbers.items()
                            if key.startswith(_MEASURES)}  # fmt: skip
            if now.verdict == "pass":
                now.reason = (f"passed when measured again alone; the first time "
                              f"{was.measured} (the host, not the link)")  # fmt: skip
            else:
                now.reason += f"; the first time, with others, {was.measured}"
            out[k] = now
        return out

    def _lag_allowed(self, d: Direction, lag: list[float]) -> float:
        """What a direction's delay may have beside its link's: a probe from a simulated
        node to an emulated one is stamped at its simulated time and leaves nestbed-sim as
        late as the simulator is behind real time (the worst lag it reported while the test
        ran); one into the simulator is stamped as it arrives, and one inside it never
        leaves simulated time."""
        leaves = d.src in self.simulated.nodes and d.dst not in self.simulated.nodes
        return max(lag, default=0.0) if leaves else 0.0

    def _latency_check(self, d: Direction, p: _Probe, alpha: float, lag_s: float = 0.0) -> Check:
        expected = d.delay_s(LATENCY_PAYLOAD)
        tolerance = stats.delay_tolerance(expected, d.jitter_s) + lag_s
        got = (p.received or {}).get("delay", {})
        n = int((p.received or {}).get("unique", 0))
        numbers: dict[str, float | int | None] = {
            "expected_ms": round(expected * 1e3, 4),
            "tolerance_ms": round(tolerance * 1e3, 4),
            "received": n,
            "sent": (p.sent or {}).get("packets_sent"),
        }
        if lag_s:
            numbers["simulator_lag_ms"] = round(lag_s * 1e3, 4)
        if d.down:
            verdict = stats.Verdict(n == 0, f"{n} probes crossed a link that is down" if n else "")
            return self.check(1, d, expected="nothing (link down)", measured=f"{n} received",
                              verdict=_word(verdict), reason=verdict.reason,
                              numbers=numbers)  # fmt: skip
        if n == 0:
            return self.check(1, d, expected=f"{expected * 1e3:.3f} ms",
                              measured="no probe arrived", verdict="fail",
                              reason=f"none of {LATENCY_PROBES} probes arrived",
                              numbers=numbers)  # fmt: skip
        mean = got["mean_ns"] / 1e9
        stdev = (got.get("stdev_ns") or 0) / 1e9
        median = got["median_ns"] / 1e9 if got.get("median_ns") is not None else None
        numbers |= {"mean_ms": round(mean * 1e3, 4), "stdev_ms": round(stdev * 1e3, 4)}
        if median is not None:
            numbers["median_ms"] = round(median * 1e3, 4)
        verdict = stats.delay_test(mean, stdev, n, expected, tolerance, alpha, median)
        if lag_s:
            note = f"the tolerance has nestbed-sim's worst lag meanwhile, {lag_s * 1e3:.3f} ms"
            verdict = stats.Verdict(verdict.passed, "; ".join(filter(None, [verdict.reason, note])))
        return self.check(1, d, expected=f"{expected * 1e3:.3f} ± {tolerance * 1e3:.3f} ms",
                          measured=f"{mean * 1e3:.3f} ms (sd {stdev * 1e3:.3f}, n {n})",
                          verdict=_word(verdict), reason=verdict.reason,
                          numbers=numbers)  # fmt: skip

    # -- level 2 -------------------------------------------------------------------------

    def routing(self, found: Sequence[Route]) -> None:
        """One datagram per pass to every pair still unproven, from a UDP socket opened inside
        the source node to a socket inside the destination: a route that works delivers at
        least one of its copies with probability 1 − α/m, one that should not works never."""
        if not found:
            return
        alpha = stats.per_test_alpha(len(found))
        copies = [stats.delivery_copies(r.delivered, alpha) for r in found]
        nodes = {r.src for r in found} | {r.dst for r in found}
        arrived = _Datagrams(self.backend, self.plan, nodes)
        with arrived:
            self._send_copies(found, list(copies), arrived)
            # A working lossy route loses all its copies with probability α/m: a false
            # failure that a fixed loss stream repeats on every run of the same experiment
            # (its seed). Such routes get their copies once more; a broken route delivers
            # nothing however often it is tried.
            silent = [i for i, r in enumerate(found) if r.reaches and not arrived.got[i]]
            again = [copies[i] if i in silent else 0 for i in range(len(found))]
            if silent:
                self._send_copies(found, again, arrived)
        for i, r in enumerate(found):
            n = arrived.got[i]
            sent = copies[i] + again[i]
            numbers = {"delivered": n, "sent": sent, "path_delivery": round(r.delivered, 6)}
            path = " ".join(f"{h.src}→{h.dst}" for h in r.hops) if r.reaches else r.why
            if r.reaches:
                ok = n > 0
                reason = "" if ok else f"none of {sent} datagrams arrived along {path}"
                self.add(2, r, expected=f"reaches via {path}", measured=f"{n} arrived",
                         verdict="pass" if ok else "fail", reason=reason,
                         numbers=numbers)  # fmt: skip
            else:
                ok = n == 0
                reason = "" if ok else f"{n} datagrams arrived though {r.why}"
                self.add(2, r, expected=f"unreachable: {r.why}", measured=f"{n} arrived",
                         verdict="pass" if ok else "fail", reason=reason,
                         numbers=numbers)  # fmt: skip

    def _send_copies(self, found: Sequence[Route], copies: list[int], arrived: _Datagrams) -> None:
        """Sends each route its ``copies`` one pass at a time, at ROUTING_PPS, receiving after
        each pass; a route that should reach stops once one copy arrived."""
        for _ in range(max(copies, default=0)):
            due = [i for i, r in enumerate(found)
                   if copies[i] > 0 and not (r.reaches and arrived.got[i])]  # fmt: skip
            if not due:
                return
            began = time.monotonic()
            for k, i in enumerate(due):
                if (ahead := began + k / ROUTING_PPS - time.monotonic()) > 0.001:
                    time.sleep(ahead)
                arrived.send(found[i].src, found[i].dst_ip, i)
                copies[i] -= 1
            arrived.collect(wait=0.2 + max(_path_delay(found[i]) for i in due))

    # -- level 3 -------------------------------------------------------------------------

    def loss(self, directions: Sequence[Direction]) -> None:
        alpha = stats.per_test_alpha(len(directions))
        plans = []
        for d in directions:
            bursty = d.bursty
            rho = 0.0
            if bursty is not None and bursty.gilbert_elliott is not None:
                ge = bursty.gilbert_elliott
                rho = stats.lag1_correlation(ge.p, ge.r)
            n = stats.loss_packets(d.loss, alpha, rho) if not d.down else 200
            pps = LOSS_MAX_PPS
            if d.rate_bps:
                pps = min(pps, LOSS_MAX_UTILIZATION * d.rate_bps / expect.wire_bits(LOSS_PAYLOAD))
            plans.append((d, n, pps, rho))
        probes = [self._loss_probe(d, n, pps) for d, n, pps, _ in plans]
        self.run_probes(probes, [pps for _, _, pps, _ in plans], LOSS_ROUND_PPS)
        checks = [self._loss_check(*plan, p, alpha) for plan, p in zip(plans, probes, strict=True)]

        def alone(k: int) -> Check:
            d, n, pps, rho = plans[k]
            again = self._loss_probe(d, n, pps)
            self._round([again])
            return self._loss_check(d, n, pps, rho, again, alpha)

        self.report.checks.extend(
            self._confirmed(checks, alone, lambda c: bool(c.numbers.get("sent")))
        )

    @staticmethod
    def _loss_probe(d: Direction, n: int, pps: float) -> _Probe:
        send = ["--size", str(LOSS_PAYLOAD), "--count", str(n), "--pps", f"{pps:.3f}"]
        idle = 0.5 + 2 * d.delay_s(LOSS_PAYLOAD) + 4 / pps
        recv = ["--count", str(n), "--expect", str(n),
                "--idle", f"{idle + RECEIVER_START_S:.3f}"]  # fmt: skip
        return _Probe(d.src, d.dst, d.dst_ip, d.src_ip, send, recv, link=d.link, linger_s=idle)

    def _loss_check(self, d: Direction, n: int, pps: float, rho: float, p: _Probe,
                    alpha: float) -> Check:  # fmt: skip
        sent = int((p.sent or {}).get("packets_sent", 0))
        unique = int((p.received or {}).get("unique", 0))
        # Datagrams the receiving socket overflowed on were lost by the host, not the
        # link; those the link's queue overflowed on came in a burst the sender made
        # catching up after it was descheduled (the test's rate is half the link's at
        # most), so the loss model never saw them either.
        host = int((p.received or {}).get("kernel_drops", 0))
        # Capped at what went missing: the queue counts the whole pipe, so traffic of a
        # run going on beside the test must not make the probe's loss negative.
        excused = min(host + p.queue_drops, max(sent - unique, 0))
        lost = max(sent - unique - excused, 0)
        sent -= excused
        verdict = stats.loss_test(lost, sent, d.loss, alpha, rho)
        reasons = [verdict.reason] if verdict.reason else []
        if host:
            reasons.append(f"the receiver's socket dropped {host}")
        if p.queue_drops:
            reasons.append(f"the link's queue dropped {p.queue_drops} of a late burst")
        verdict = stats.Verdict(verdict.passed, "; ".join(reasons))
        numbers = {"configured": round(d.loss, 6), "sent": sent, "lost": lost,
                   "pps": round(pps, 1), "planned": n, "receiver_drops": host,
                   "queue_drops": p.queue_drops}  # fmt: skip
        measured = f"{lost / sent:.2%} ({lost} of {sent})" if sent else "nothing sent"
        return self.check(3, d, expected=f"{d.loss:.2%}" + (" bursty" if rho else ""),
                          measured=measured, verdict=_word(verdict), reason=verdict.reason,
                          numbers=numbers)  # fmt: skip

    # -- level 4 -------------------------------------------------------------------------

    def bandwidth(self, directions: Sequence[Direction]) -> None:
        tests: list[tuple[Direction, int, float]] = []
        skipped: dict[int, Check] = {}  # by position among directions, to keep their order
        for d in directions:
            payload = _bandwidth_payload(d.rate_bps)
            if payload is None:
                least = expect.wire_bits(64) * BANDWIDTH_MIN_PACKETS / BANDWIDTH_SECONDS
                reason = (f"{_rate(d.rate_bps)} is too slow for a bandwidth test (needs at "
                          f"least {_rate(least)}); skipped")  # fmt: skip
                skipped[len(tests) + len(skipped)] = self.check(
                    4, d, expected=_rate(d.rate_bps), measured="-", verdict="skip", reason=reason
                )
                continue
            # Loss before the narrowest stage thins what reaches its queue; send more.
            before = 1 - (1 - d.loss) / (1 - d.loss_after_bottleneck())
            rate = min(BANDWIDTH_OVERDRIVE * d.rate_bps / max(1 - before, 1 / 3),
                       3 * d.rate_bps)  # fmt: skip
            tests.append((d, payload, rate))
        with tempfile.TemporaryDirectory(prefix="nestbed-linktest-") as logs:
            first = self._measure_bandwidth(tests, Path(logs) / "first", together=True)
            checks = [
                self._bandwidth_check(*t, p, m) for t, (p, m) in zip(tests, first, strict=True)
            ]
            logs_again = Path(logs) / "again"

            def alone(k: int) -> Check:
                [(p, m)] = self._measure_bandwidth([tests[k]], logs_again / str(k), together=False)
                return self._bandwidth_check(*tests[k], p, m)

            checks = self._confirmed(checks, alone, lambda c: bool(c.numbers.get("measured_bps")))
        measured = iter(checks)
        self.report.checks.extend(
            skipped[i] if i in skipped else next(measured) for i in range(len(directions))
        )

    def _measure_bandwidth(self, tests: Sequence[tuple[Direction, int, float]], logs: Path,
                           together: bool) -> list[tuple[_Probe, float | None]]:  # fmt: skip
        """Sends each test's stream, in rounds (``together``) or one at a time; gives each
        test's probe and its median block rate."""
        logs.mkdir(parents=True)
        probes = []
        for k, (d, payload, rate) in enumerate(tests):
            send = ["--size", str(payload), "--rate", f"{rate:.0f}",
                    "--duration", str(BANDWIDTH_SECONDS), "--sndbuf", str(4 << 20)]  # fmt: skip
            wait = BANDWIDTH_SECONDS + 1 + 2 * d.delay_s(payload)
            recv = ["--duration", f"{wait:.3f}", "--log", str(logs / f"{k}.csv")]
            probes.append(_Probe(d.src, d.dst, d.dst_ip, d.src_ip, send, recv))
        if together:
            self.run_probes(probes, [rate for _, _, rate in tests], BANDWIDTH_ROUND_LOAD_BPS)
        else:
            for p in probes:
                self._round([p])
        bits = [expect.wire_bits(payload) for _, payload, _ in tests]
        return [(p, block_rate(logs / f"{k}.csv", bits[k])) for k, p in enumerate(probes)]

    def _bandwidth_check(self, d: Direction, payload: int, offered: float, p: _Probe,
                         measured: float | None) -> Check:  # fmt: skip
        """``measured`` is the median goodput of blocks of arrivals (see block_rate); the
        expected one is the narrowest stage's rate, thinned by any loss after it."""
        received = p.received or {}
        goodput = (received.get("rate") or {}).get("wire_bps")
        achieved = (p.sent or {}).get("achieved_wire_rate_bps") or 0
        tolerance = stats.RATE_TOLERANCE
        expected = d.rate_bps * (1 - d.loss_after_bottleneck())
        numbers = {"expected_bps": round(expected), "measured_bps": measured and round(measured),
                   "goodput_bps": goodput and round(goodput), "tolerance": tolerance,
                   "offered_bps": round(offered), "sender_bps": round(achieved),
                   "payload": payload, "received": received.get("packets", 0)}  # fmt: skip
        shown = f"{_rate(expected)} ± {tolerance:.1%}"
        if measured is None:
            return self.check(4, d, expected=shown, measured="nothing arrived",
                              verdict="fail", reason="fewer than two datagrams arrived",
                              numbers=numbers)  # fmt: skip
        error = measured / expected - 1
        if achieved < d.rate_bps and error < -tolerance:
            return self.check(4, d, expected=shown, measured=_rate(measured), verdict="skip",
                              reason=f"the sender reached only {_rate(achieved)}, not above the "
                                     "link's rate; inconclusive", numbers=numbers)  # fmt: skip
        ok = abs(error) <= tolerance
        reason = "" if ok else f"delivered {_rate(measured)}, {error:+.1%} off the expected rate"
        shown_goodput = f", goodput {_rate(goodput)}" if goodput else ""
        return self.check(4, d, expected=shown,
                          measured=f"{_rate(measured)} ({error:+.2%}{shown_goodput})",
                          verdict="pass" if ok else "fail", reason=reason,
                          numbers=numbers)  # fmt: skip


def block_rate(log: Path, bits: int) -> float | None:
    """Median goodput (wire bits per second) over blocks of consecutive arrivals, each block
    spanning at least BLOCK_SECONDS, from a receiver log. A block in which a descheduled sender
    left the queue empty, or the receiver read a backlog at once, is an outlier the median
    ignores; goodput over the whole test would count it."""
    try:
        at = pd.read_csv(log, usecols=["recv_ns"])["recv_ns"].to_numpy(dtype=np.int64)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return None
    if at.size < 2:
        return None
    typical = float(np.median(np.diff(at)))
    size = max(BLOCK_MIN_FRAMES, int(BLOCK_SECONDS * 1e9 / typical) if typical > 0 else 0)
    starts = np.arange(0, at.size - size, size)
    if starts.size == 0:
        starts, size = np.array([0]), at.size - 1
    spans = (at[starts + size] - at[starts]) / 1e9
    rates = size * bits / spans[spans > 0]
    return float(np.median(rates)) if rates.size else None


def _bandwidth_payload(rate_bps: int) -> int | None:
    """The largest payload (up to a full frame) that still gives BANDWIDTH_MIN_PACKETS in the
    test; None when even 64-byte payloads would not."""
    frames = rate_bps * BANDWIDTH_SECONDS / BANDWIDTH_MIN_PACKETS  # bits per packet
    payload = min(1472, int(frames / 8) - expect.FRAME_HEADERS - expect.WIRE_OVERHEAD)
    return payload if payload >= 64 else None


def _path_delay(r: Route) -> float:
    return sum(h.delay_s(16) + h.jitter_s for h in r.hops)


def _linger(probes: Sequence[_Probe], receivers: Sequence[subprocess.Popen]) -> None:
    """Once the round's senders are done: each receiver still running ends (SIGTERM, after
    which it reports what it received) when its linger has passed."""
    start = time.monotonic()
    for p, r in zip(probes, receivers, strict=True):
        if p.linger_s is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.wait(timeout=max(0.0, start + p.linger_s - time.monotonic()))
        if r.poll() is None:
            r.terminate()


def _summary(process: subprocess.Popen) -> dict[str, Any] | None:
    out, _ = process.communicate(timeout=120)
    with contextlib.suppress(ValueError):
        return json.loads(out)
    return None


def _word(verdict: stats.Verdict) -> str:
    return "pass" if verdict.passed else "fail"


def _rate(bps: float) -> str:
    for unit, scale in (("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.0f} b/s"


class _Datagrams:
    """A UDP socket inside each node's namespace, to send from and receive on; datagrams
    carry the index of their test."""

    _FORMAT = struct.Struct("!I")

    def __init__(self, backend: Backend, plan: Plan, nodes: Iterable[str]):
        self.backend = backend
        self.sockets: dict[str, socket.socket] = {}
        for name in sorted(nodes):
            sock = backend.open_socket(plan, name, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.bind(("0.0.0.0", ROUTING_PORT))
            sock.setblocking(False)
            self.sockets[name] = sock
        self.got: collections.Counter[int] = collections.Counter()

    def __enter__(self) -> _Datagrams:
        return self

    def __exit__(self, *_: object) -> None:
        for sock in self.sockets.values():
            sock.close()

    def send(self, node: str, ip: str, test: int) -> None:
        with contextlib.suppress(OSError):  # unreachable is an answer, not an error
            self.sockets[node].sendto(self._FORMAT.pack(test), (ip, ROUTING_PORT))

    def collect(self, wait: float) -> None:
        """Receives for ``wait`` seconds, and as much longer as the back end's sockets may
        deliver later than the network: a cluster's, whose datagrams are sent and drained
        through the scheduler, says how much in ``socket_delay_s``, which grows while a
        drain is slow (a local socket has none), so it is asked again as the wait goes."""
        start = time.monotonic()

        def left() -> float:
            late = getattr(self.backend, "socket_delay_s", 0.0)
            return start + wait + late - time.monotonic()

        while (remaining := left()) > 0:
            ready, _, _ = select.select(list(self.sockets.values()), [], [], remaining)
            for sock in ready:
                with contextlib.suppress(BlockingIOError, OSError):
                    while True:
                        data = sock.recv(64)
                        if len(data) == self._FORMAT.size:
                            (test,) = self._FORMAT.unpack(data)
                            self.got[test] += 1


def write(report: Report, folder: Path) -> Path:
    """Writes the report into the run folder ``folder``'s linktest/ (linktest-2, -3 ... when
    one exists): checks.csv, linktest.json and linktest.md."""
    first = target = RunFolder(folder).linktest
    k = 1
    while target.exists():
        k += 1
        target = first.with_name(f"{first.name}-{k}")
    target.mkdir(parents=True)
    (target / "linktest.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    with (target / "checks.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["level", "link", "direction", "expected", "measured", "verdict", "reason"])
        for c in report.checks:
            out.writerow([c.level, c.link, c.direction, c.expected, c.measured, c.verdict,
                          c.reason])  # fmt: skip
    (target / "linktest.md").write_text(markdown(report))
    return target


def markdown(report: Report) -> str:
    lines = [f"# linktest of {report.experiment}, level {report.level}", ""]
    counts = report.to_json()["counts"]
    lines.append(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped in "
        f"{report.seconds:.1f} s; each level's chance of any false failure is at most "
        f"{stats.ALPHA:.0%} (Bonferroni)."
    )
    for level, title in LEVELS.items():
        rows = [c for c in report.checks if c.level == level]
        if not rows:
            continue
        lines += ["", f"## Level {level}: {title}", ""]
        lines += md.table(
            ["link", "direction", "expected", "measured", "verdict", "reason"],
            [[c.link, c.direction, c.expected, c.measured, c.verdict, c.reason] for c in rows],
        )
    return "\n".join(lines) + "\n"
