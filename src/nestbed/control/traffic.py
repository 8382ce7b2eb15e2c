"""Traffic agents of a live experiment: CBR over UDP with nestbed-probe, FTP over TCP with
nestbed.control.bulk.

Each `start` is a session: a receiver already listening in the destination node (started ahead,
so a start event costs one process spawn) and a sender in the source node. Raw output of every
session is kept under ``traffic/raw/``; `results` turns it into the flow's table rows.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from nestbed.backend.cluster.clocks import one_way_correction_ns
from nestbed.binaries import probe_recv, probe_send
from nestbed.errors import EnvironmentProblem, NestbedError, Refused
from nestbed.model import Agent, Application
from nestbed.results.folder import RunFolder

# CBR sessions use UDP ports from here, FTP sessions TCP ports; 64 sessions per flow.
_PORT_BASE = 20000
_SESSIONS = 64
_CONGESTION = {"reno": "reno", "newreno": "reno", "sack": "reno", "fack": "reno", "vegas": "vegas"}
_SEGMENT = 1448  # a full TCP segment's payload on a 1500-byte MTU with timestamps
_HEADER = 12  # nestbed-probe's header: the smallest datagram it sends


class Node(Protocol):
    """What a flow needs from the controller."""

    folder: RunFolder

    def spawn_user(self, node: str, argv: list[str], output: Path) -> subprocess.Popen:
        """Starts a tool of the experiment (as the experiment's user, on a server)."""
        ...

    def writable(self, path: Path) -> None:
        """Makes ``path`` an empty file the experiment's tools may write."""
        ...

    def listening(self, process: subprocess.Popen, port: int, proto: str) -> None: ...

    def now_s(self) -> float: ...

    def clock_offset_ns(self, node: str) -> float:
        """The monotonic clock of the node's host less the controller's (0 on one host)."""
        ...


@dataclass
class Session:
    port: int
    receiver: subprocess.Popen
    sender: subprocess.Popen | None = None
    started_s: float | None = None
    ended_s: float | None = None
    files: dict[str, Path] = field(default_factory=dict)


class Flow:
    """One application (cbr or ftp) between its agent's node and its peer agent's node."""

    kind = ""
    proto = ""
    tool_writes: tuple[str, ...] = ()  # the parts its tools write themselves

    def __init__(
        self,
        app: Application,
        agent: Agent,
        source: str,
        destination: str,
        address: str,
        index: int,
        ctl: Node,
    ):
        self.app, self.agent = app, agent
        self.name, self.source, self.destination, self.address = (
            app.name,
            source,
            destination,
            address,
        )
        self.ctl = ctl
        self.port_base = _PORT_BASE + index * _SESSIONS
        self.sessions: list[Session] = []
        self.notes: list[str] = []
        self._preparing: threading.Thread | None = None
        self._failure: Exception | None = None
        self.raw = ctl.folder.traffic / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        s = self.sessions[-1] if self.sessions else None
        return bool(s and s.sender and s.sender.poll() is None)

    def prepare(self) -> None:
        """Starts the receiver of the next session and waits until it listens."""
        k = len(self.sessions)
        if k >= _SESSIONS:
            raise Refused(f"{self.kind} {self.name} was started {_SESSIONS} times; no more ports")
        port = self.port_base + k
        files = {part: self.raw / f"{self.name}-{k}.{part}" for part in self._parts()}
        for part in self.tool_writes:  # by name, not through an output the controller opened
            self.ctl.writable(files[part])
        argv = self.receiver_argv(port, files)
        receiver = self.ctl.spawn_user(self.destination, argv, files["recv"])
        self.sessions.append(Session(port, receiver, files=files))
        self.ctl.listening(receiver, port, self.proto)

    def start(self, amount: int | None = None) -> None:
        if self.running:
            raise Refused(f"{self.kind} {self.name} is already running; stop it first")
        self._ready()
        session = self.sessions[-1]
        session.started_s = self.ctl.now_s()
        argv = self.sender_argv(session.port, session.files, amount)
        session.sender = self.ctl.spawn_user(self.source, argv, session.files["send"])

    def stop(self) -> None:
        """Stops the sender; the receiver of the next session starts in the background, so
        events right after this one are not delayed by it."""
        if not self.running:
            raise Refused(f"{self.kind} {self.name} is not running")
        session = self.sessions[-1]
        session.ended_s = self.ctl.now_s()
        session.sender.send_signal(self.stop_signal)  # type: ignore[union-attr]
        self._preparing = threading.Thread(target=self._next, args=(session,), daemon=True)
        self._preparing.start()

    def _next(self, previous: Session) -> None:
        _wait(previous.sender)  # type: ignore[arg-type]
        try:
            self.prepare()
        except Exception as exc:  # reported at the next start
            self._failure = exc

    def _ready(self) -> None:
        """Waits for the background preparation of the next session, if one is under way."""
        if self._preparing is not None:
            self._preparing.join()
            self._preparing = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise EnvironmentProblem(f"{self.kind} {self.name} could not restart: {failure}")

    def stop_senders(self) -> None:
        with contextlib.suppress(NestbedError):
            self._ready()
        for session in self.sessions:
            if session.sender and session.sender.poll() is None:
                self._stop_sender(session)

    def _stop_sender(self, session: Session) -> None:
        assert session.sender is not None
        session.ended_s = self.ctl.now_s()
        session.sender.send_signal(self.stop_signal)
        _wait(session.sender)

    def stop_receivers(self) -> None:
        for session in self.sessions:
            if session.receiver.poll() is None:
                session.receiver.send_signal(signal.SIGTERM)
            _wait(session.receiver)

    stop_signal = signal.SIGTERM

    # -- per kind ---------------------------------------------------------------------------

    def _parts(self) -> tuple[str, ...]:
        return ("recv", "send")

    def receiver_argv(self, port: int, files: dict[str, Path]) -> list[str]:
        raise NotImplementedError

    def sender_argv(self, port: int, files: dict[str, Path], amount: int | None) -> list[str]:
        raise NotImplementedError

    def results(self, t0_ns: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        raise NotImplementedError

    def _row(self, **values: Any) -> dict[str, Any]:
        started = [s.started_s for s in self.sessions if s.started_s is not None]
        ended = [s.ended_s for s in self.sessions if s.ended_s is not None]
        outcome = "ok" if started else "not started"
        if self.notes:
            outcome += "; " + "; ".join(self.notes)
        return {
            "flow": self.name,
            "kind": self.kind,
            "source": self.source,
            "destination": self.destination,
            "started_s": min(started) if started else None,
            "ended_s": max(ended) if ended else None,
            "outcome": outcome,
            **values,
        }


class CbrFlow(Flow):
    """Emulab's CBR: ``packetSize_`` bytes of UDP payload every ``interval_`` seconds, where
    ``rate_`` gives ``interval_ = packetSize_ * 8 / rate_`` when no interval is set."""

    kind, proto = "cbr", "udp"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.vars: dict[str, str] = {}

    def set(self, var: str, value: str) -> None:
        """Changes a variable; a running sender is restarted with it."""
        from nestbed.units import parse_bandwidth, parse_time

        check = {
            "packetSize_": int,
            "rate_": parse_bandwidth,
            "interval_": parse_time,
            "maxpkts_": int,
            "random_": int,
        }[var]
        check(value)
        self.vars[var] = value
        if var == "rate_":
            self.vars.pop("interval_", None)
        if self.running:
            self.stop()
            self.start()

    def _params(self) -> tuple[int, float, int | None]:
        from nestbed.units import parse_bandwidth, parse_time

        size = int(self.vars.get("packetSize_", self.app.packet_size_bytes))
        if "interval_" in self.vars:
            interval = parse_time(self.vars["interval_"])
        elif "rate_" in self.vars or self.app.interval_s is None:
            rate = parse_bandwidth(self.vars.get("rate_", str(self.app.rate_bps)))
            if rate <= 0:
                raise Refused(f"cbr {self.name}: rate_ must be above 0")
            interval = size * 8 / rate
        else:
            interval = self.app.interval_s
        count = int(self.vars["maxpkts_"]) if "maxpkts_" in self.vars else self.app.max_packets
        if size < _HEADER:
            note = f"packetSize_ {size} raised to {_HEADER} bytes (the probe header)"
            if note not in self.notes:
                self.notes.append(note)
            size = _HEADER
        return size, interval, count

    tool_writes = ("log",)

    def _parts(self) -> tuple[str, ...]:
        return ("recv", "send", "log")

    def receiver_argv(self, port: int, files: dict[str, Path]) -> list[str]:
        return probe_recv(f"{self.address}:{port}", "--log", str(files["log"]))

    def sender_argv(self, port: int, files: dict[str, Path], amount: int | None) -> list[str]:
        size, interval, count = self._params()
        limit = ["--count", str(count)] if count is not None else ["--duration", "1000000"]
        to = f"{self.address}:{port}"
        return probe_send(to, "--size", str(size), "--interval", f"{interval!r}", *limit)

    def results(self, t0_ns: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        import numpy as np  # only at the end: a smaller controller spawns faster

        sent = [_json(s.files["send"]) for s in self.sessions if s.sender]
        got = [_json(s.files["recv"]) for s in self.sessions if s.sender]
        logs = [_recv_log(s.files["log"]) for s in self.sessions if s.sender]
        packets_sent = sum(int(x.get("packets_sent", 0)) for x in sent)
        received = sum(int(x.get("unique", 0)) for x in got)
        series: list[dict[str, Any]] = []
        row = self._row(
            packets_sent=packets_sent,
            bytes_sent=sum(int(x.get("bytes_sent", 0)) for x in sent),
            packets_received=received,
            bytes_received=sum(int(x.get("bytes", 0)) for x in got),
            loss=(1 - received / packets_sent) if packets_sent else None,
        )
        log = np.concatenate(logs) if logs else np.empty((0, 3))
        if len(log):
            # The stamps are the sender's host's clock when sent and the receiver's when
            # received: on a cluster each is corrected by its host's offset.
            receiver_ns = self.ctl.clock_offset_ns(self.destination)
            skew_ns = one_way_correction_ns(self.ctl.clock_offset_ns(self.source), receiver_ns)
            delay_ms = (log[:, 2] - skew_ns) / 1e6
            # Arrival time on this machine's CLOCK_MONOTONIC (mod 2^48, as in the probe
            # header) since t0.
            arrival = (log[:, 0] + log[:, 2] - receiver_ns - t0_ns) % (1 << 48) / 1e9
            span = arrival.max() - arrival.min()
            row.update(
                throughput_bps=log[:, 1].sum() * 8 / span if span > 0 else None,
                delay_mean_ms=float(delay_ms.mean()),
                delay_p50_ms=float(np.percentile(delay_ms, 50)),
                delay_p99_ms=float(np.percentile(delay_ms, 99)),
            )
            bins = np.floor(arrival).astype(int)
            for second in range(bins.min(), bins.max() + 1):
                mask = bins == second
                n = int(mask.sum())
                nbytes = int(log[mask, 1].sum())
                series.append(
                    {
                        "t_s": second,
                        "packets": n,
                        "bytes": nbytes,
                        "throughput_bps": nbytes * 8,
                        "delay_mean_ms": float(delay_ms[mask].mean()) if n else None,
                    }
                )
        return row, series


class FtpFlow(Flow):
    """A bulk TCP transfer (nestbed.control.bulk), unlimited or of a given size (``produce``,
    ``send``: that many bytes delivered)."""

    kind, proto = "ftp", "tcp"
    stop_signal = signal.SIGINT

    def _bulk(self, role: str, port: int) -> list[str]:
        argv = [sys.executable, "-m", "nestbed.control.bulk", role, "--port", str(port)]
        argv += ["--bind" if role == "recv" else "--to", self.address]
        window = self.agent.params.get("window_")
        if window:
            # ns-2's window_ caps the packets in flight; the nearest a real stack offers is
            # a receive buffer (and a send buffer) of that many full segments.
            argv += ["--window", str(int(float(window)) * _SEGMENT)]
        return argv

    def receiver_argv(self, port: int, files: dict[str, Path]) -> list[str]:
        return self._bulk("recv", port)

    def sender_argv(self, port: int, files: dict[str, Path], amount: int | None) -> list[str]:
        argv = self._bulk("send", port)
        if amount:
            argv += ["--bytes", str(amount)]
        algorithm = _CONGESTION.get(self.agent.variant or "")
        if algorithm and algorithm in _available_congestion():
            argv += ["--congestion", algorithm]
        elif self.agent.variant and self.agent.variant not in ("fulltcp", "linux"):
            note = f"TCP variant {self.agent.variant} ran as the kernel's default"
            if note not in self.notes:
                self.notes.append(note)
        return argv

    def segment_bytes(self) -> int:
        return int(self.agent.params.get("packetSize_", "1000"))

    def results(self, t0_ns: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        sent = received = retransmits = 0
        seconds = 0.0
        series: list[dict[str, Any]] = []
        for k, s in enumerate(self.sessions):
            if not s.sender:
                continue
            client, server = _json(s.files["send"]), _json(s.files["recv"])
            sent += int(client.get("bytes", 0))
            retransmits += int(client.get("retransmits", 0))
            received += int(server.get("bytes", 0))
            seconds += float(server.get("seconds", 0.0))
            if client.get("error"):
                self.notes.append(f"session {k}: {client['error']}")
            first_ns = server.get("first_ns")
            for second, nbytes in enumerate(server.get("intervals", [])):
                series.append(
                    {
                        "t_s": (first_ns - t0_ns) / 1e9 + second,
                        "bytes": nbytes,
                        "throughput_bps": nbytes * 8,
                    }
                )
        row = self._row(
            bytes_sent=sent,
            bytes_received=received,
            throughput_bps=received * 8 / seconds if seconds else None,
            retransmits=retransmits,
        )
        return row, series


def _available_congestion() -> set[str]:
    path = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    with contextlib.suppress(OSError):
        return set(path.read_text().split())
    return set()


def _wait(process: subprocess.Popen, timeout: float = 5) -> None:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _json(path: Path) -> dict[str, Any]:
    """The JSON a tool printed, or {} when it printed none (killed, or never started)."""
    try:
        text = path.read_text().strip()
        return json.loads(text.splitlines()[-1] if text.startswith('{"role') else text)
    except (OSError, ValueError, IndexError):
        return {}


def _recv_log(path: Path) -> Any:
    """send_ns, size, delay_ns of every datagram in a probe receive log (a numpy array)."""
    import numpy as np

    try:
        data = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(2, 4, 5), ndmin=2)
    except (OSError, ValueError):
        return np.empty((0, 3))
    return data.astype(np.int64) if data.size else np.empty((0, 3))
