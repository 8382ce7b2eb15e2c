"""An experiment's nestbed-sim on this machine: started at swap-in inside the experiment's
fabric namespace with one AF_PACKET socket per attachment, stopped at swap-out like linkd
(its pid file is in the experiment's run directory, where swap-out and cleanup look).

nestbed-sim writes "ready" once the simulation is built, then a lag line every second; the
log (``sim.log``) is what ``lag`` reads. It answers commands (start and stop traffic tools in
simulated nodes, change or take down simulated links, read their counters) on a Unix socket
in the same directory (``sim.sock``), which swap-in opens and hands to it: ``SimChannel`` is
its client. Above the back ends, a ``Simulator`` is how the controller, linktest and the
instruments reach it, its commands and its log: ``LocalSimulator`` on this machine, the
cluster's on the host that runs it (``cluster.simulator``).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from nestbed.backend.linux import SIM_PID
from nestbed.backend.plan import Plan
from nestbed.binaries import built_binary
from nestbed.errors import EnvironmentProblem, InternalError, NestbedError, Refused

LOG = "sim.log"
PID = SIM_PID  # the Linux back end names it: a command that only reads an experiment stops there
SOCKET = "sim.sock"
_ETH_P_ALL = 0x0003
_SO_RCVBUFFORCE = 33  # socket.h: SO_RCVBUF past rmem_max, for root
_ATTACHMENT_BUFFER_BYTES = 16 << 20
_POLL_S = 0.05  # how often a waiting SimulatedProcess asks whether its tool is done


def binary(plan: Plan) -> str:
    try:
        return built_binary("nestbed-sim")
    except EnvironmentProblem:
        raise EnvironmentProblem(
            f"experiment {plan.experiment} has simulated nodes (make-simulated), which run "
            "in nestbed-sim: install the hybrid extra and build it with `make setup`"
        ) from None


def open_attachment(ifname: str) -> socket.socket:
    """An AF_PACKET socket on ``ifname`` of the calling thread's namespace, for every frame,
    with a receive buffer that holds the frames of a few hundred milliseconds in which the
    machine gives nestbed-sim no CPU (the default holds about 140 full-sized frames)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, _ATTACHMENT_BUFFER_BYTES)
        sock.bind((ifname, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def start(
    plan: Plan, directory: Path, sockets: Mapping[str, socket.socket], timeout_s: float = 10
) -> None:
    """Starts nestbed-sim in the fabric with ``sockets`` (by attachment link) and waits until
    it has built the simulation; an InternalError with its last words if it does not."""
    simulation = plan.simulation
    if simulation is None:
        raise InternalError(f"experiment {plan.experiment} has no simulated part to start")
    fds = {link: sock.fileno() for link, sock in sockets.items()}
    argv = ["ip", "netns", "exec", plan.fabric, binary(plan)]
    log = directory / LOG
    path = directory / SOCKET
    path.unlink(missing_ok=True)  # a crashed simulator's, of this experiment's directory
    with log.open("ab") as out, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as control:
        control.bind(str(path))
        control.listen(8)
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=out,
            start_new_session=True,
            pass_fds=(*fds.values(), control.fileno()),
        )
        control_fd = control.fileno()  # the same number in nestbed-sim
    # `ip netns exec` execs nestbed-sim in place, so this is its own pid; written first, so a
    # failed start is stopped by the swap-in's rollback.
    (directory / PID).write_text(f"{process.pid}\n")
    assert process.stdin is not None
    with process.stdin:
        process.stdin.write(simulation.description(fds, control_fd).encode())
    _wait_ready(process, log, timeout_s)


def _wait_ready(process: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pause = 0.002
    while True:
        lines = log.read_text(errors="replace").splitlines()
        if "ready" in lines:
            return
        if process.poll() is not None:
            raise InternalError(f"nestbed-sim exited at start: {lines[-1] if lines else '?'}")
        if time.monotonic() > deadline:
            raise InternalError(f"nestbed-sim did not start within {timeout_s:g} s; see {log}")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def running(directory: Path) -> bool:
    """Whether the nestbed-sim whose pid is in ``directory`` is still running (not a zombie)."""
    try:
        pid = int((directory / PID).read_text())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def word(path: Path) -> str:
    """A path as one word of a nestbed-sim command (percent-encoded)."""
    return quote(str(path), safe="/")


class SimChannel:
    """A connection to an experiment's nestbed-sim: one command, one reply at a time (the
    controller's threads share it)."""

    def __init__(self, directory: Path, timeout_s: float = 10):
        self.path = directory / SOCKET
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout_s)
            self.sock.connect(str(self.path))
        except BaseException:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("r", encoding="utf-8")
        self.lock = threading.Lock()

    def request(self, *words: object) -> dict[str, Any]:
        """Carries out one command; its reply. A refusal (an unknown link, a port taken)
        is Refused with nestbed-sim's reason."""
        line = " ".join(str(w) for w in words)
        with self.lock:
            self.sock.sendall(f"{line}\n".encode())
            answer = self.reader.readline()
        return reply(answer, self.path)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def reply(answer: str | bytes, path: Path) -> dict[str, Any]:
    """nestbed-sim's reply line to a command (empty: it closed the socket first); a refusal
    raised as Refused with its reason."""
    if not answer:
        raise InternalError(f"nestbed-sim at {path} closed its control socket")
    found = json.loads(answer)
    if not found.get("ok"):
        raise Refused(f"the simulated part refused it: {found.get('error')}")
    return dict(found)


class Simulator(Protocol):
    """An experiment's nestbed-sim, wherever it runs."""

    def request(self, *words: object) -> dict[str, Any]:
        """Carries out one command (``SimChannel.request``); files it names are written
        where it names them."""

    def log(self, offset: int = 0) -> tuple[str, int] | None:
        """What nestbed-sim has logged from byte ``offset`` on, and the byte it ends at;
        None if it left no log."""

    def running(self) -> bool:
        """Whether nestbed-sim still runs."""

    def close(self) -> None:
        """Closes the connection (a later request opens another)."""


@runtime_checkable
class TimedSimulator(Simulator, Protocol):
    """A nestbed-sim a hop away (on a cluster's host): a simulated link's change is handed
    over ``lead_s`` ahead of its time, with the time, and sent to nestbed-sim there then
    (nestbed-sim takes a command only at once, and carries it out as it arrives)."""

    lead_s: float

    def request_at(self, due: float, lines: list[str]) -> float:
        """Carries out the commands ``lines`` in order when this machine's time.monotonic()
        reads ``due`` (at once if it has passed); when nestbed-sim had carried them out,
        on that clock."""
        ...


class LocalSimulator:
    """The experiment's nestbed-sim on this machine, found by its run directory; connected
    when first asked."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.channel: SimChannel | None = None

    def request(self, *words: object) -> dict[str, Any]:
        if self.channel is None:
            self.channel = SimChannel(self.directory)
        return self.channel.request(*words)

    def log(self, offset: int = 0) -> tuple[str, int] | None:
        return read_log(self.directory, offset)

    def running(self) -> bool:
        return running(self.directory)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def read_log(directory: Path, offset: int = 0) -> tuple[str, int] | None:
    """The log of the nestbed-sim in ``directory`` from byte ``offset`` on, and its end."""
    try:
        with (directory / LOG).open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return None
    return data.decode(errors="replace"), offset + len(data)


class SimulatedProcess:
    """A traffic tool running in nestbed-sim, as a flow (or linktest) sees a process."""

    def __init__(self, channel: Simulator, tool: str, argv: Sequence[str]):
        self.channel, self.tool, self.args = channel, tool, list(argv)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                if self.channel.request("state", self.tool)["done"]:
                    self.returncode = 0
            except (OSError, NestbedError) as exc:
                self.returncode = self._after_failure(exc)
        return self.returncode

    def send_signal(self, _signum: int) -> None:
        """Any signal stops the tool, which writes its summary before the reply. A stop
        that fails while nestbed-sim still runs is sent once more: a tool left running
        keeps its port, and the next tool on it is refused."""
        for _ in range(2):
            if self.returncode is not None:
                return
            try:
                self.channel.request("stop", self.tool)
                self.returncode = 0
            except (OSError, NestbedError) as exc:
                self.returncode = self._after_failure(exc)
        if self.returncode is None:
            self.returncode = 1

    def _after_failure(self, exc: BaseException) -> int | None:
        """After a request about the tool failed with ``exc``: 1 if nestbed-sim answered it
        (it refuses a tool it does not have) or is gone (the run's lag record says so), None
        while it runs (the tool may too: a request that got no answer, from a host's agent
        too slow to give one, says nothing of it)."""
        if isinstance(exc, Refused):
            return 1
        try:
            return None if self.channel.running() else 1
        except (OSError, NestbedError):
            return 1

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    kill = terminate

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(_POLL_S)
        return code


@dataclass(frozen=True)
class Lag:
    """nestbed-sim's lag behind real time: the largest in each second of simulated time
    (second, lag), the worst so far, and how many samples passed the hard limit so far."""

    per_second_s: tuple[tuple[int, float], ...]
    worst_s: float
    late: int


def lag(log_text: str) -> Lag:
    """The lag lines of a nestbed-sim log ("lag SECOND MAX WORST LATE" each second,
    "worst_lag_s WORST late LATE" at the end); other lines are not lag."""
    per_second: list[tuple[int, float]] = []
    worst, late = 0.0, 0
    for line in log_text.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] == "lag":
            per_second.append((int(words[1]), float(words[2])))
            worst, late = float(words[3]), int(words[4])
        elif len(words) == 4 and words[0] == "worst_lag_s":
            worst, late = float(words[1]), int(words[3])
    return Lag(tuple(per_second), worst, late)
