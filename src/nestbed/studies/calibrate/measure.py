"""Runs a calibration on a live experiment: swaps each target in through nestbed's API, starts
the receivers, sends the bursts, snapshots every calibrated node's counters between bursts,
and turns logs and snapshots into one row per burst and receiver."""

from __future__ import annotations

import contextlib
import json
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nestbed
from nestbed.backend import get as get_backend
from nestbed.binaries import built_binary, probe_recv, probe_send
from nestbed.errors import EnvironmentProblem, InternalError, UserError
from nestbed.lifecycle import Testbed
from nestbed.lifecycle.live import Live
from nestbed.store import Store
from nestbed.store.states import State
from nestbed.studies.calibrate import capture
from nestbed.studies.calibrate.attribution import (
    Snapshot,
    attribute,
    parse_snapshot,
    snapshot_command,
)
from nestbed.studies.calibrate.logs import echoes_by_sender, received_by_burst
from nestbed.studies.calibrate.settings import Settings
from nestbed.studies.calibrate.topology import BUFFER_BYTES, GROUP, TXQUEUELEN, Target

PORT = 5001
IGMP_REPORT_MS = 10
Progress = Callable[[str, int], None]  # what is being measured, bursts just done


def _sysctl(key: str) -> Path:
    return Path("/proc/sys", *key.split("."))


def read_host(keys: Iterator[str] | tuple[str, ...]) -> dict[str, str]:
    return {k: _sysctl(k).read_text().strip() for k in keys}


@contextlib.contextmanager
def host_sysctls(values: dict[str, str]) -> Iterator[dict[str, str]]:
    """The host's sysctls set to VALUES for the block and restored however it ends (they are
    global: every experiment on the machine sees them meanwhile). Yields what is in effect."""
    before = read_host(tuple(values))
    changed: list[str] = []
    try:
        for key, value in values.items():
            if before[key] != value:
                _sysctl(key).write_text(value)
                changed.append(key)
        yield read_host(tuple(values))
    finally:
        for key in reversed(changed):
            _sysctl(key).write_text(before[key])


@dataclass
class Session:
    """One target swapped in: its addresses and interfaces."""

    target: Target
    live: Live
    settings: Settings
    folder: Path

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.target.sender, *self.target.receivers)

    def interface(self, node: str) -> str:
        return self.live.plan.interfaces()[(self.target.link, node)]

    def run(self, node: str, command: str | list[str], timeout: float = 120) -> str:
        done = self.live.exec(node, command, timeout=timeout)
        if done.returncode < 0:
            # Nothing in the calibration sends signals to its own commands: something outside
            # it (a `nestbed cleanup`, an OOM kill) ended the experiment's processes.
            name = command[1] if isinstance(command, list) else command.split()[0]
            raise EnvironmentProblem(
                f"{name} in node {node} of {self.target.experiment.name} was killed by signal "
                f"{-done.returncode} from outside the calibration (a `nestbed cleanup`?); "
                "the tables keep what was measured before"
            )
        if not done.ok:
            raise InternalError(
                f"{command!r} in node {node} exited {done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout

    def snapshots(self) -> dict[str, Snapshot]:
        """Every calibrated node's counters, read in parallel so they are close in time."""

        def one(node: str) -> Snapshot:
            return parse_snapshot(self.run(node, snapshot_command((self.interface(node),))))

        with ThreadPoolExecutor(max_workers=min(8, len(self.nodes))) as pool:
            return dict(zip(self.nodes, pool.map(one, self.nodes), strict=True))

    def prepare(self) -> dict[str, Any]:
        """Applies the per-interface part of the profile, fills the ARP tables, and records
        what each node's settings are (the evidence that the profile took)."""
        facts: dict[str, Any] = {}
        for node in self.nodes:
            ifname = self.interface(node)
            if self.target.profile == "tuned":
                self.run(node, f"ip link set dev {ifname} txqueuelen {TXQUEUELEN}")
            # ARP entries stay valid for an hour, so no ARP exchange lands in a burst's
            # counters (the pings below fill the tables). Per interface: a namespace has no
            # neigh/default of its own.
            self.run(
                node, f"echo 3600000 > /proc/sys/net/ipv4/neigh/{ifname}/base_reachable_time_ms"
            )
            if self.target.multicast:
                # A receiver joining the group repeats its IGMP report for up to a second;
                # every other member of the LAN receives it. Repeated within 10 ms instead,
                # the reports are over before the first snapshot (see point()).
                conf = f"/proc/sys/net/ipv4/conf/{ifname}"
                self.run(
                    node,
                    f"echo {IGMP_REPORT_MS} > {conf}/igmpv3_unsolicited_report_interval; "
                    f"echo {IGMP_REPORT_MS} > {conf}/igmpv2_unsolicited_report_interval",
                )
            out = self.run(
                node,
                f"cat /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max "
                f"/proc/sys/net/core/rmem_default /proc/sys/net/core/wmem_default "
                f"/sys/class/net/{ifname}/tx_queue_len; tc qdisc show dev {ifname} | head -1",
            ).split("\n")
            facts[node] = {
                "interface": ifname,
                "rmem_max": int(out[0]),
                "wmem_max": int(out[1]),
                "rmem_default": int(out[2]),
                "wmem_default": int(out[3]),
                "txqueuelen": int(out[4]),
                "qdisc": out[5].strip(),
            }
        sender_ip = self.target.address(self.target.sender)
        for node in self.target.receivers:
            # Both ARP entries, and a LAN switch that has learned both ports; a lossy link may
            # lose a ping, so each is tried until one comes back.
            self._ping(self.target.sender, self.target.address(node))
            self._ping(node, sender_ip)
        return facts

    def _ping(self, node: str, address: str, tries: int = 10) -> None:
        for _ in range(tries):
            if self.live.exec(node, ["ping", "-c", "1", "-W", "1", address]).ok:
                return
        raise InternalError(f"node {node} cannot reach {address} ({tries} pings lost)")

    def _receiver(self, node: str, log: Path) -> subprocess.Popen:
        ip = self.target.address(node)
        argv = probe_recv(f"{ip}:{PORT}", "--echo", "--log", str(log))
        if self.target.multicast:
            argv += ["--group", GROUP]
        argv += ["--rcvbuf", str(BUFFER_BYTES if self.target.profile == "tuned" else 0)]
        return self.live.active.start(
            node, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def _captures(self, folder: Path) -> dict[str, tuple[subprocess.Popen, Path]]:
        """tcpdump at the sender's and every receiver's interface, running when this returns."""
        started = {}
        try:
            for node in self.nodes:
                path = folder / f"capture-{node}.pcap"
                argv = capture.tcpdump_argv(self.interface(node), path, PORT)
                started[node] = (
                    self.live.active.start(node, argv, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True),
                    path,
                )  # fmt: skip
            deadline = time.monotonic() + 10
            while not all(p.exists() and p.stat().st_size >= 24 for _, p in started.values()):
                if time.monotonic() > deadline or any(
                    proc.poll() is not None for proc, _ in started.values()
                ):
                    raise InternalError("tcpdump did not start in every calibrated node")
                time.sleep(0.02)
        except BaseException:
            for proc, _ in started.values():
                _stop(proc, summary=False)
            raise
        return started

    def point(self, size: int, burst: int, progress: Progress) -> list[dict[str, Any]]:
        """All repetitions of one (packet size, burst size): one row per burst and receiver."""
        t = self.target
        folder = self.folder / "raw" / t.key / f"size{size}-burst{burst}"
        folder.mkdir(parents=True, exist_ok=True)
        logs = {node: folder / f"recv-{node}.csv" for node in t.receivers}
        captures = self._captures(folder) if self.settings.capture else {}
        receivers = {}
        sends: list[dict[str, Any]] = []
        try:
            for node in t.receivers:
                receivers[node] = self._receiver(node, logs[node])
            for process in receivers.values():
                self.live.active.backend.wait_listening(process, PORT, "udp")
            if t.multicast:
                time.sleep(5 * IGMP_REPORT_MS / 1000)  # the joins' IGMP reports are over
            snaps = [self.snapshots()]
            dest = GROUP if t.multicast else t.address(t.receivers[0])
            for rep in range(self.settings.repetitions):
                argv = probe_send(
                    f"{dest}:{PORT}",
                    "--bind", t.address(t.sender), "--size", str(size),
                    "--count", str(burst), "--burst", str(burst), "--gap", "0",
                    "--first-burst", str(rep), "--echo-wait", str(self.settings.gap_s),
                    "--log", str(folder / f"send-{rep}.csv"),
                    "--echo-log", str(folder / f"echo-{rep}.csv"),
                )  # fmt: skip
                if t.profile == "tuned":
                    argv += ["--sndbuf", str(BUFFER_BYTES)]
                sends.append(json.loads(self.run(t.sender, argv, timeout=600)))
                snaps.append(self.snapshots())
                progress(f"{t.key}: {size} B × {burst}, repetition {rep + 1}", 1)
        finally:
            summaries = {n: _stop(p) for n, p in receivers.items()}
            dropped = {n: _stop(p, summary=False) for n, (p, _) in captures.items()}
        (folder / "summaries.json").write_text(
            json.dumps({"send": sends, "recv": summaries, "tcpdump": dropped}, indent=1) + "\n"
        )
        rows = self._rows(size, burst, folder, sends, snaps, logs)
        if captures:
            _cross_check(rows, {n: p for n, (_, p) in captures.items()}, t.sender, dropped)
        return rows

    def _rows(
        self,
        size: int,
        burst: int,
        folder: Path,
        sends: list[dict[str, Any]],
        snaps: list[dict[str, Snapshot]],
        logs: dict[str, Path],
    ) -> list[dict[str, Any]]:
        t = self.target
        received = {node: received_by_burst(path) for node, path in logs.items()}
        by_ip = {t.address(node): node for node in t.receivers}
        rows = []
        for rep, sent in enumerate(sends):
            grew = {n: snaps[rep + 1][n].minus(snaps[rep][n]) for n in self.nodes}
            echoes = {
                by_ip.get(ip, ip): d
                for ip, d in echoes_by_sender(folder / f"echo-{rep}.csv").items()
            }
            for node in t.receivers:
                got = received[node].get(rep)
                loss = attribute(
                    attempted=sent["packets_attempted"],
                    refused=sent["send_errors"],
                    received=got.packets if got else 0,
                    sender=grew[t.sender],
                    sender_if=self.interface(t.sender),
                    receiver=grew[node],
                    receiver_if=self.interface(node),
                )
                echo = echoes.get(node)
                rows.append(
                    {
                        "topology": t.topology,
                        "profile": t.profile,
                        "mode": "multicast" if t.multicast else "unicast",
                        "receiver": node,
                        "size": size,
                        "burst": burst,
                        "rep": rep,
                        **loss.as_row(),
                        "owd_mean_us": got.mean_us if got else None,
                        "owd_median_us": got.median_us if got else None,
                        "owd_p99_us": got.p99_us if got else None,
                        "echoes": echo.packets if echo else 0,
                        "rtt_mean_us": echo.mean_us if echo else None,
                        "rtt_median_us": echo.median_us if echo else None,
                        "configured_loss": t.configured_loss,
                        "sender_pps": sent.get("achieved_pps"),
                    }
                )
        return rows


def _cross_check(
    rows: list[dict[str, Any]], pcaps: dict[str, Path], sender: str, dropped: dict[str, Any]
) -> None:
    """Adds the paper's tcpdump view to each row: packets logged at the sender's and the
    receiver's interface, loss at A, B and C counted from them, and the one-way delay from
    interface to interface (both captures stamp on the host's clock)."""
    seen = {node: capture.probes_by_burst(path, PORT) for node, path in pcaps.items()}
    for row in rows:
        at_sender = seen[sender].get(row["rep"], {})
        at_receiver = seen[row["receiver"]].get(row["rep"], {})
        delays = [at_receiver[s] - at_sender[s] for s in at_receiver.keys() & at_sender.keys()]
        row.update(
            cap_sender=len(at_sender),
            cap_receiver=len(at_receiver),
            cap_a=row["attempted"] - len(at_sender),
            cap_b=len(at_sender) - len(at_receiver),
            cap_c=len(at_receiver) - row["received"],
            cap_dropped=(dropped.get(sender) or 0) + (dropped.get(row["receiver"]) or 0),
            if_owd_mean_us=statistics.fmean(delays) / 1e3 if delays else None,
        )


def _stop(process: subprocess.Popen, *, summary: bool = True) -> Any:
    """Stops a receiver (or tcpdump) with SIGINT and returns the receiver's JSON summary (or
    tcpdump's count of packets the kernel dropped)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"error": "did not stop on SIGINT"} if summary else None
    if not summary:
        return capture.kernel_drops(err or "")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return {"error": f"exit {process.returncode}: {err.strip()}"}


def _settle(db: Store, name: str) -> None:
    """A calibration experiment left failed by an earlier calibration is swapped out (it is
    ours: its name is the calibration's); an active one is somebody's running calibration."""
    record = db.find(name)
    if record is None:
        return
    if record.state == State.FAILED:
        Testbed(db, get_backend()).swap_out(name, outcome="failed")
    elif record.state not in (State.DEFINED, State.SWAPPED):
        raise UserError(
            f"experiment {name} is {record.state}, perhaps another calibration; wait for it "
            f"or end it with `nestbed swapout {name}`"
        )


def calibrate_target(
    target: Target,
    settings: Settings,
    folder: Path,
    progress: Progress,
    *,
    store: str | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Swaps TARGET in, measures every point, swaps it out (also on errors and Ctrl-C)."""
    built_binary("nestbed-probe")  # a missing build is one sentence before the swap-in
    progress(f"{target.key}: swapping in {target.experiment.name}", 0)
    with Store.open(store) as db:
        _settle(db, target.experiment.name)
        with nestbed.swapin(
            target.experiment, store=db, results=folder / "runs" / target.key
        ) as live:
            rows, facts = _measure(live, target, settings, folder, progress)
    return rows, facts


def _measure(
    live: Live, target: Target, settings: Settings, folder: Path, progress: Progress
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    session = Session(target, live, settings, folder)
    facts: dict[str, Any] = {"nodes": session.prepare()}
    for size in settings.sizes:
        for burst in settings.bursts:
            rows += session.point(size, burst, progress)
    if live.plan.needs_linkd:
        # The link emulator's own count of what it dropped: B, seen from inside the link.
        with contextlib.suppress(Exception):  # evidence only; the rows stand without it
            facts["link_counters"] = live.status().get("link_counters")
    return rows, facts
