"""The run's simulated part, as the controller reaches it: traffic of simulated nodes, events on
simulated links and their counters, all carried out by the experiment's nestbed-sim.

A simulated node has no operating system, but it runs nestbed's two traffic tools: nestbed-sim
does what nestbed-probe (CBR over UDP) and the bulk TCP transfer (FTP) do, with the same wire
format, summaries and logs (`csrc/nestbed-sim/tools.h`). A flow starts its ends by the argv an
emulated node would run; for a simulated node, ``command`` turns that argv into the
nestbed-sim command that does the same, and ``SimulatedProcess`` (``backend.sim``, which
linktest uses too) gives it the face of a process (poll, send_signal, wait), so a flow whose
source, destination or both are simulated is started, stopped and read like any other.
Anything else is refused in one sentence.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nestbed.backend import simplan
from nestbed.backend.linkd import Pipe, pipe_counters
from nestbed.backend.plan import Plan
from nestbed.backend.sim import SimulatedProcess, Simulator, TimedSimulator, word
from nestbed.errors import Refused
from nestbed.model import Link

_PROBE = "nestbed-probe"
_BULK = ("-m", "nestbed.control.bulk")
# The options each tool takes, as the flows give them (all with a value).
_OPTIONS = {
    ("probe", "recv"): {"--bind", "--log"},
    ("probe", "send"): {"--to", "--size", "--interval", "--count", "--duration"},
    ("bulk", "recv"): {"--bind", "--port", "--window"},
    ("bulk", "send"): {"--to", "--port", "--bytes", "--window", "--congestion"},
}


def command(tool: str, node: str, argv: Sequence[str], output: Path) -> str:
    """The nestbed-sim command that runs ``argv`` (nestbed-probe, or the bulk transfer, as an
    emulated node would run it) in simulated node ``node`` as tool ``tool``, its summary
    written to ``output``."""
    if Path(argv[0]).name == _PROBE and len(argv) > 1:
        kind, role, rest = "probe", argv[1], argv[2:]
    elif tuple(argv[1:3]) == _BULK and len(argv) > 3:
        kind, role, rest = "bulk", argv[3], argv[4:]
    else:
        raise Refused(
            f"simulated node {node} has no operating system to run {argv[0]}; only the traffic "
            "of its agents runs there"
        )
    options = _options(kind, role, rest)
    out = word(output)
    if kind == "probe" and role == "recv":
        port = options["--bind"].rpartition(":")[2]
        return f"udp-recv {tool} {node} {port} {word(Path(options['--log']))} {out}"
    if kind == "probe":
        address, _, port = options["--to"].rpartition(":")
        interval = float(options["--interval"])
        count = int(options.get("--count", 0))
        if "--duration" in options:  # until stopped, as the flows ask (or for that long)
            count = int(float(options["--duration"]) / interval)
        size = options["--size"]
        return f"udp-send {tool} {node} {address} {port} {size} {interval!r} {count} {out}"
    window = options.get("--window", "0")
    if role == "recv":
        return f"tcp-recv {tool} {node} {options['--port']} {window} {out}"
    return (
        f"tcp-send {tool} {node} {options['--to']} {options['--port']} "
        f"{options.get('--bytes', '0')} {window} {options.get('--congestion', '-')} {out}"
    )


def _options(kind: str, role: str, words: Sequence[str]) -> dict[str, str]:
    allowed = _OPTIONS.get((kind, role))
    if allowed is None or len(words) % 2:
        raise Refused(f"a simulated node runs no {kind} {role} {' '.join(words)}")
    found = dict(zip(words[::2], words[1::2], strict=True))
    unknown = set(found) - allowed
    if unknown:
        names = ", ".join(sorted(unknown))
        raise Refused(f"a simulated node's {kind} {role} has no option {names}")
    return found


class SimulatedPart:
    """The experiment's nestbed-sim during a run (nothing without simulated nodes); one
    connection, opened when first needed."""

    def __init__(self, plan: Plan, simulator: Simulator):
        simulation = plan.simulation
        self.nodes = set(simulation.nodes) if simulation else set()
        self.links = set(simulation.link_names) if simulation else set()
        self.simulator = simulator
        self.prefix = uuid.uuid4().hex[:8]  # tools of earlier runs stay in nestbed-sim
        self.started = 0

    def _channel(self) -> Simulator:
        return self.simulator

    def spawn(self, node: str, argv: Sequence[str], output: Path) -> SimulatedProcess:
        """Starts ``argv`` (a traffic tool) in simulated node ``node``."""
        self.started += 1
        tool = f"{self.prefix}-{self.started}-{output.name}"
        channel = self._channel()
        channel.request(command(tool, node, argv, output))
        return SimulatedProcess(channel, tool, argv)

    @property
    def lead_s(self) -> float:
        """How long ahead of its time a simulated link's change is handed over: a nestbed-sim
        a hop away (a cluster's host) takes it with its time; this machine's, at once."""
        simulator = self.simulator
        return simulator.lead_s if isinstance(simulator, TimedSimulator) else 0.0

    def set_state(self, link: str, state: str, due: float | None = None) -> float:
        """Sets simulated ``link`` up or down, at ``due`` (time.monotonic()) where it is
        handed over ahead (``lead_s``); when nestbed-sim had done it."""
        return self._send(due, f"link {link} {state}")

    def shape(self, link: Link, due: float | None = None) -> float:
        """Gives simulated ``link`` the shaping it has now (at ``due``, as ``set_state``)."""
        return self._send(due, simplan.settings(link))

    def _send(self, due: float | None, line: str) -> float:
        channel = self._channel()
        if due is not None and isinstance(channel, TimedSimulator):
            return channel.request_at(due, [line])
        channel.request(line)
        return time.monotonic()

    def counters(self) -> dict[Pipe, dict[str, Any]]:
        """Every simulated link's counters, as linkd's pipes; empty when nestbed-sim does
        not answer."""
        if not self.links:
            return {}
        try:
            found = pipe_counters(self._channel())
        except OSError:
            found = {}
        if not found:
            self.close()  # opened again next time
        return found

    def close(self) -> None:
        self.simulator.close()
