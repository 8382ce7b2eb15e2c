"""An experiment's nestbed-sim on the host that runs it, as the controller, linktest and the
instruments on the controlling machine reach it (``sim.Simulator``).

Each command is one Dask task to that host, whose agent hands it to nestbed-sim's control
socket there and brings the reply back. A traffic tool's command names files nestbed-sim
writes (its summary, a receiver's per-datagram log), paths on the controlling machine, in
the results or linktest's folder: they are written on the host in the experiment's state
folder instead, and copied to their paths here once the tool is done (the reply to a
``state`` that says so, or to its ``stop``), as a remote command's own files are
(``remote``). The log nestbed-sim writes its lag in is read on the host from a byte on.

A simulated link's change (an event) is handed to the host ahead of its time, as a link
emulator's is (``LINK_LEAD_S``), and the host's agent sends it to nestbed-sim at its time:
nestbed-sim takes no command ahead of its time (its protocol has none), so the agent waits
for it, and the change lands when the agent wakes rather than a Dask round trip late.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from nestbed.backend import linux, sim
from nestbed.backend.plan import Plan

# The words of a tool's command that are files nestbed-sim writes (``control.simulated``).
FILE_WORDS = {"udp-recv": (4, 5), "udp-send": (8,), "tcp-recv": (5,), "tcp-send": (8,)}
SCRATCH = "sim-files"  # in the experiment's state folder on the host
# A file word as sent to the host: its name there. A path word is percent-encoded
# (``sim.word``), so none begins with it.
HOST_FILE = "@"

# A timed command is sent this close to its time by a sleep, the rest by a spin (a timer
# wakes late); nestbed-sim's answer is given up this long after the time.
_SPIN_S = 0.002
SIM_ANSWER_S = 5.0

# Runs ``function(PLAN, *args)`` on the simulator's host (PLAN: the experiment's, as far as
# its state there needs it); its result, or raises what it raised.
OnHost = Callable[..., Any]
# Runs the commands on the simulator's host when this machine's time.monotonic() reads the
# time given; when nestbed-sim had carried them out, on this machine's clock.
AtHost = Callable[[list[str], float], float]


class RemoteSimulator:
    """The nestbed-sim of a swapped-in experiment on its host, through ``on_host``; a link's
    change handed over ``lead_s`` ahead of its time through ``at_host``."""

    def __init__(self, on_host: OnHost, at_host: AtHost, lead_s: float):
        self.on_host, self.at_host, self.lead_s = on_host, at_host, lead_s
        self.files: dict[str, dict[str, Path]] = {}  # tool -> its name on the host -> path here

    def request(self, *words: object) -> dict[str, Any]:
        line = [str(w) for w in words]
        verb = line[0] if line else ""
        if verb in FILE_WORDS and len(line) > max(FILE_WORDS[verb]):
            tool = line[1]
            named = {}
            for k in FILE_WORDS[verb]:
                name = f"{tool}-{k}"
                named[name] = Path(unquote(line[k]))
                line[k] = HOST_FILE + name
            self.files[tool] = named
        tool = line[1] if verb in ("state", "stop") and len(line) > 1 else ""
        fetch = sorted(self.files.get(tool, {}))
        reply, files = self.on_host(request_on_host, line, fetch)
        for name, data in files.items():
            self.files[tool][name].write_bytes(data)
        if reply.get("done") and tool:
            self.files.pop(tool, None)
        return reply

    def request_at(self, due: float, lines: list[str]) -> float:
        return self.at_host(lines, due)

    def log(self, offset: int = 0) -> tuple[str, int] | None:
        result: tuple[str, int] | None = self.on_host(log_on_host, offset)
        return result

    def running(self) -> bool:
        return bool(self.on_host(running_on_host))

    def close(self) -> None:
        """Nothing is held open: each request connects on the host."""


def request_on_host(p: Plan, line: list[str], fetch: list[str]) -> tuple[dict, dict[str, bytes]]:
    """One command to this host's nestbed-sim of the experiment (run on the agent): its
    file words made files in the state folder, and those named in ``fetch`` read back (and
    removed) once the reply says the tool is done."""
    directory = linux.run_dir(p)
    scratch = directory / SCRATCH
    words = []
    for w in line:
        if w.startswith(HOST_FILE):
            scratch.mkdir(mode=0o700, exist_ok=True)
            w = sim.word(scratch / w.removeprefix(HOST_FILE))
        words.append(w)
    channel = sim.SimChannel(directory)
    try:
        reply = channel.request(*words)
    finally:
        channel.close()
    files = {}
    if reply.get("done"):
        for name in fetch:
            path = scratch / name
            with contextlib.suppress(FileNotFoundError):
                files[name] = path.read_bytes()
                path.unlink()
    return reply, files


async def request_on_host_at(p: Plan, due_ns: int, lines: list[str]) -> int:
    """Sends this host's nestbed-sim of the experiment the commands ``lines`` (a simulated
    link's change) when this host's monotonic clock reads ``due_ns`` (at once if it has
    passed), each once the one before was answered: nestbed-sim takes a command only as it
    arrives. When the last was answered, on that clock. Run on the agent's event loop, so the
    wait holds none of its threads; nestbed-sim is given up ``SIM_ANSWER_S`` after the time
    (TimeoutError)."""
    path = linux.run_dir(p) / sim.SOCKET
    async with asyncio.timeout(max(0.0, (due_ns - time.monotonic_ns()) / 1e9) + SIM_ANSWER_S):
        reader, writer = await asyncio.open_unix_connection(str(path))  # before the wait
        try:
            wait_s = (due_ns - time.monotonic_ns()) / 1e9 - _SPIN_S
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            while time.monotonic_ns() < due_ns:  # the last moments: a timer wakes too late
                pass
            for line in lines:
                writer.write(f"{line}\n".encode())
                await writer.drain()
                sim.reply(await reader.readline(), path)
            done_ns = time.monotonic_ns()
        finally:
            writer.close()
    return done_ns


def log_on_host(p: Plan, offset: int) -> tuple[str, int] | None:
    """This host's nestbed-sim log of the experiment from byte ``offset`` on (run on the
    agent)."""
    return sim.read_log(linux.run_dir(p), offset)


def running_on_host(p: Plan) -> bool:
    return sim.running(linux.run_dir(p))
