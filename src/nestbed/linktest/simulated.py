"""linktest's probes in simulated nodes (make-simulated): nestbed-sim's UDP tools do what
nestbed-probe does in an emulated node (the same header, log and summary counts), so
latency, loss and bandwidth are measured along every direction with a simulated end as along
any other. A ``SimulatedProbe`` gives such a tool the face of the probe's process that
linktest reads (poll, wait, terminate, communicate), its summary completed with what
nestbed-probe would report and nestbed-sim's tool does not count itself (one-way delays,
from its log; the sender's rate, from its first and last send)."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed.backend import sim
from nestbed.backend.linkd import Pipe, pipe_counters
from nestbed.backend.plan import Plan
from nestbed.backend.sim import SimulatedProcess, Simulator, word
from nestbed.errors import InternalError

if TYPE_CHECKING:
    from nestbed.backend.base import Backend

_POLL_S = 0.02
# nestbed-sim writes a lag line every simulated second; a little more than one is waited for.
_LAG_WAIT_S = 1.5


class SimulatedProbes:
    """Starts probes in the simulated nodes of a swapped-in experiment, through its
    nestbed-sim (one connection, opened when first needed)."""

    def __init__(self, plan: Plan | None, backend: Backend, wire_bits: Any):
        simulation = plan.simulation if plan is not None else None
        self.nodes = set(simulation.nodes) if simulation is not None else set()
        self.plan, self.backend = plan, backend
        self.wire_bits = wire_bits  # payload bytes -> bits on the wire, linktest's measure
        self.channel: Simulator | None = None
        self.prefix = f"linktest-{uuid.uuid4().hex[:8]}"
        self.started = 0

    def run_dir(self) -> Path:
        """The experiment's state folder here, where the tools' summaries and logs go."""
        assert self.plan is not None
        return self.backend.run_dir(self.plan)

    def start(self, node: str, argv: Sequence[str]) -> SimulatedProbe:
        """``argv``, nestbed-probe's (``recv --bind IP:PORT ...`` or ``send --to IP:PORT
        ...``, as linktest gives them), run by nestbed-sim in simulated node ``node``."""
        channel = self._channel()
        self.started += 1
        tool = f"{self.prefix}-{self.started}"
        role, options = argv[1], _options(argv[2:])
        out = self.run_dir() / f"{tool}.json"
        log = Path(options.get("--log") or self.run_dir() / f"{tool}.csv")
        if role == "recv":
            port = options["--bind"].rpartition(":")[2]
            line = f"udp-recv {tool} {node} {port} {word(log)} {word(out)}"
        elif role == "send":
            address, _, port = options["--to"].rpartition(":")
            size = int(options["--size"])
            interval = _interval(options, self.wire_bits(size))
            if "--count" in options:
                count = int(options["--count"])
            else:
                count = max(1, round(float(options["--duration"]) / interval))
            line = (
                f"udp-send {tool} {node} {address} {port} {size} {interval!r} {count} {word(out)}"
            )
        else:
            raise InternalError(f"linktest asked a simulated node for nestbed-probe {role}")
        channel.request(line)
        seconds = (
            float(options["--duration"]) if role == "recv" and "--duration" in options else None
        )
        return SimulatedProbe(channel, tool, list(argv), out, log, seconds, self.wire_bits)

    @contextlib.contextmanager
    def lag(self) -> Iterator[list[float]]:
        """The lags nestbed-sim reports for the seconds the block spans (none without
        simulated nodes): it reports a second's worst lag once that second is over, so the
        block ends when the second it ended in has been reported."""
        lags: list[float] = []
        if not self.nodes:
            yield lags
            return
        simulator = self._channel()

        def logged() -> str:
            found = simulator.log()
            return "" if found is None else found[0]

        before = sim.lag(logged()).per_second_s
        # The second in progress began before the block: its line is not written yet.
        first = before[-1][0] + 1 if before else 0
        yield lags
        ended = len(sim.lag(logged()).per_second_s)
        deadline = time.monotonic() + _LAG_WAIT_S
        while True:
            seconds = sim.lag(logged()).per_second_s
            if len(seconds) > ended or time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
        lags += [lag for second, lag in seconds if second >= first]

    def counters(self) -> dict[Pipe, dict[str, Any]]:
        """The simulated links' counters, as linkd's pipes."""
        return pipe_counters(self._channel())

    def _channel(self) -> Simulator:
        if self.channel is None:
            assert self.plan is not None
            self.channel = self.backend.simulator(self.plan)
        return self.channel

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def _options(words: Sequence[str]) -> dict[str, str]:
    """nestbed-probe's options: ``--name value``, or a flag alone (``--kernel-times``: in
    nestbed-sim an arrival is timed when it happens anyway), which maps to ""."""
    options: dict[str, str] = {}
    name = None
    for given in words:
        if given.startswith("--"):
            name = given
            options[name] = ""
        elif name is not None:
            options[name], name = given, None
    return options


def _interval(options: dict[str, str], wire_bits: int) -> float:
    """Seconds between datagrams, from the pace nestbed-probe was given."""
    if "--interval" in options:
        return float(options["--interval"])
    if "--pps" in options:
        return 1 / float(options["--pps"])
    return wire_bits / float(options["--rate"])


class SimulatedProbe(SimulatedProcess):
    """A probe tool in nestbed-sim, as linktest sees a probe's process. A receiver given a
    duration ends when it has passed; others end when linktest terminates them (a receiver)
    or when they have sent their count (a sender)."""

    def __init__(self, channel: Simulator, tool: str, argv: list[str], out: Path, log: Path,
                 seconds: float | None, wire_bits: Any):  # fmt: skip
        super().__init__(channel, tool, argv)
        self.out, self.log, self.wire_bits = out, log, wire_bits
        self.ends = None if seconds is None else time.monotonic() + seconds

    def poll(self) -> int | None:
        if self.returncode is None and self.ends is not None and time.monotonic() >= self.ends:
            self.terminate()
        return super().poll()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Its summary, as nestbed-probe's stdout (after it ends)."""
        self.wait(timeout)
        try:
            summary = json.loads(self.out.read_text())
        except (OSError, ValueError):
            return "", ""
        if summary.get("role") == "recv":
            summary |= _arrivals(self.log)
        elif summary.get("packets_sent", 0) > 1:
            span_s = (summary["last_send_ns"] - summary["first_send_ns"]) / 1e9
            bits = self.wire_bits(summary["payload_bytes"])
            if span_s > 0:
                summary["achieved_wire_rate_bps"] = (summary["packets_sent"] - 1) * bits / span_s
        return json.dumps(summary), ""


def _arrivals(log: Path) -> dict[str, Any]:
    """What nestbed-probe's receiver summary has beside nestbed-sim's: the one-way delays of
    the datagrams in its log, and no datagrams dropped by a socket (ns-3's have no limit)."""
    try:
        rows = log.read_text().splitlines()[1:]
    except OSError:
        rows = []
    delays = [int(row.split(",")[5]) for row in rows if row.count(",") == 5]
    found: dict[str, Any] = {"kernel_drops": 0}
    if delays:
        found["delay"] = {
            "mean_ns": statistics.fmean(delays),
            "stdev_ns": statistics.stdev(delays) if len(delays) > 1 else 0.0,
            "median_ns": statistics.median(delays),
        }
    return found
