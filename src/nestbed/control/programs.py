"""Program objects of a live experiment: commands run in their node with captured output,
exit status, timeout and expected exit code, as Emulab's program agent runs them.

A program is started by the run (``Run.start_program``): by nestbed-spawn, outside the
controller's process, where its node is entered from this machine (``backend.spawner``),
which also writes its output into its files; otherwise (a cluster's host, a simulated node)
by the back end, its output copied into its files here (``Pumped``). Either way what comes
back is a ``Started``."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from nestbed.errors import Refused
from nestbed.model import Program
from nestbed.results.folder import RunFolder
from nestbed.units import parse_time

# Output beyond this per stream is counted and dropped, so a program printing gigabytes
# cannot fill the disk of the results folder (nestbed-spawn keeps the same limit).
OUTPUT_LIMIT = 64 * 1024 * 1024
# A program stopped (by an event, its timeout or the end of the run) gets SIGTERM on its whole
# process group, then SIGKILL on what is left of the group after this many seconds. The group
# is the program's shell and everything it started, so its children never outlive the run.
STOP_GRACE_S = 2.0
_GONE_POLL_S = 0.01
KILL_WAIT_S = 5.0  # how long the run's end waits for a group it sent SIGKILL to to go


class Started(Protocol):
    """A program's process as the runner sees it: a ``Popen``'s pid, status and ``wait``, the
    ``time.monotonic()`` its process began its command (``started_at``) and its first
    ``exec`` was known to have succeeded, and the end of its output."""

    pid: int
    started_at: float
    exec_at: float  # time.monotonic() its first exec was known to have succeeded

    @property
    def returncode(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...

    def output_ended(self, timeout: float | None) -> bool:
        """Whether its output files are complete within ``timeout`` (a child left in the
        background may hold its output open)."""
        ...


# node, argv, environment, stdout file, stderr file, and the time.monotonic() it is due at
# where it was handed over ahead of its time (None: now): the program started, its process begun
StartProgram = Callable[[str, list[str], dict[str, str], Path, Path, float | None], Started]


class Pumped:
    """A program started by the back end with its output as pipes (a command on a cluster's
    host, whose output comes back here), copied to its files by two threads."""

    def __init__(self, process: subprocess.Popen, stdout: Path, stderr: Path):
        self.process, self.pid = process, process.pid
        self.started_at = self.exec_at = time.monotonic()  # (Popen returns after the exec)
        # a command on a cluster's host is signalled there (``_signal_group``)
        self.signal_group = getattr(process, "signal_group", None)
        self.pumps = [
            threading.Thread(target=_pump, args=(process.stdout, stdout), daemon=True),
            threading.Thread(target=_pump, args=(process.stderr, stderr), daemon=True),
        ]
        for pump in self.pumps:
            pump.start()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.process.wait(timeout)

    def output_ended(self, timeout: float | None) -> bool:
        for pump in self.pumps:
            pump.join(timeout)
        return not any(pump.is_alive() for pump in self.pumps)


@dataclass
class Invocation:
    number: int
    process: Started
    started_s: float  # since the run's t0: when its process began its command
    stdout: Path
    stderr: Path
    ended_s: float | None = None
    timed_out: bool = False
    stopped: bool = False


class ProgramRunner:
    """Runs one program object; every start is an invocation with its own output files."""

    def __init__(
        self,
        program: Program,
        folder: RunFolder,
        start: StartProgram,
        since_t0: Callable[[float], float],
        record: Callable[[dict[str, Any]], None],
        grace_s: float = STOP_GRACE_S,
        workdir: Path | None = None,
    ):
        self.program = program
        self.command = program.command
        # Where it starts unless it names a dir: the controller's own folder in a local run;
        # on a server, its node's working folder (the only one it may write in).
        self.dir = program.dir or (str(workdir) if workdir else None)
        self.timeout_s = program.timeout_s
        self.expected = program.expected_exit_code
        self.results = folder.root
        self.folder = folder.programs
        self.folder.mkdir(parents=True, exist_ok=True)
        self.own = folder.program(program.name)
        self.grace_s = grace_s
        # since_t0: a time.monotonic() as seconds since the run's t0
        self.start_program, self.since_t0, self.record = start, since_t0, record
        self.invocations: list[Invocation] = []
        self.done = threading.Condition()

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def running(self) -> bool:
        return bool(self.invocations) and self.invocations[-1].ended_s is None

    def set(self, var: str, value: str) -> None:
        if self.running:
            raise Refused(f"program {self.name} is running; set {var} before starting it")
        if var == "command":
            self.command = value
        elif var == "dir":
            self.dir = value
        elif var == "timeout":
            self.timeout_s = parse_time(value) or None
        else:  # expected-exit-code
            self.expected = int(value)

    def start(self, due: float | None = None) -> Invocation:
        """Starts the next invocation, at ``due`` (a ``time.monotonic()``) where it was
        handed over ahead of its time; once its process has begun."""
        if self.running:
            raise Refused(f"program {self.name} is already running; stop it first")
        number = len(self.invocations)
        stem = self.name if number == 0 else f"{self.name}.{number}"
        stdout, stderr = self.folder / f"{stem}.stdout", self.folder / f"{stem}.stderr"
        # In its dir the command is a shell's of its own: `cd D && exec CMD` would exec only
        # the first of a list such as `a > f && b`.
        shell = (f"cd {shlex.quote(self.dir)} && exec sh -c {shlex.quote(self.command)}"
                 if self.dir else self.command)  # fmt: skip
        # A folder of its own in the results, where it may leave files (metrics.json: figures
        # a sweep puts in its table).
        self.own.mkdir(exist_ok=True)
        process = self.start_program(
            self.program.node,
            ["sh", "-c", shell],
            {
                **os.environ,
                "NESTBED_PROGRAM_DIR": str(self.own),
                "NESTBED_NODE": self.program.node,
                # the Python that runs nestbed, for programs written with it (its studies)
                "NESTBED_PYTHON": sys.executable,
            },
            stdout,
            stderr,
            due,
        )
        inv = Invocation(number, process, self.since_t0(process.started_at), stdout, stderr)
        self.invocations.append(inv)
        threading.Thread(target=self._watch, args=(inv,), daemon=True).start()
        return inv

    def wait(self, timeout: float | None = None) -> None:
        """Waits until the current invocation ends (for `run` and sequences)."""
        with self.done:
            self.done.wait_for(lambda: not self.running, timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.running:
            raise Refused(f"program {self.name} is not running")
        inv = self.invocations[-1]
        inv.stopped = True
        _signal_group(inv.process, sig)

    def stop_all(self) -> None:
        """At the end of a run: stops what still runs and waits for its record, then ends
        whatever any invocation left behind in its process group (a child started in the
        background outlives its shell)."""
        if self.running:
            self.stop()
            self.wait(self.grace_s * 2)
        for inv in self.invocations:
            _end_group(inv.process.pid, self._marker(), self.grace_s)

    def _watch(self, inv: Invocation) -> None:
        try:
            inv.process.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            inv.timed_out = True
            _signal_group(inv.process, signal.SIGTERM)
        try:
            inv.process.wait(self.grace_s if inv.timed_out or inv.stopped else None)
        except subprocess.TimeoutExpired:
            _signal_group(inv.process, signal.SIGKILL)
            inv.process.wait()
        if inv.timed_out or inv.stopped:
            # The shell may have ended on SIGTERM while a child of it ignores it.
            _end_group(inv.process.pid, self._marker(), self.grace_s, signaled=True)
        inv.process.output_ended(self.grace_s)
        inv.ended_s = self.since_t0(time.monotonic())
        code = inv.process.returncode
        if inv.timed_out:
            outcome = "timeout"
        elif inv.stopped:
            outcome = "killed"
        else:
            outcome = "ok" if code == self.expected else "failed"
        self.record(
            {
                "program": self.name,
                "node": self.program.node,
                "command": self.command,
                "started_s": inv.started_s,
                "ended_s": inv.ended_s,
                "exit_code": code,
                "expected_exit_code": self.expected,
                "timed_out": inv.timed_out,
                "outcome": outcome,
                "stdout": str(inv.stdout.relative_to(self.results)),
                "stderr": str(inv.stderr.relative_to(self.results)),
            }
        )
        with self.done:
            self.done.notify_all()

    def _marker(self) -> bytes:
        """What every process of this program has in its environment (it inherits it)."""
        return f"\0NESTBED_PROGRAM_DIR={self.own}\0".encode()

    def status(self) -> dict[str, Any]:
        inv = self.invocations[-1] if self.invocations else None
        return {
            "program": self.name,
            "node": self.program.node,
            "state": "running" if self.running else ("ended" if inv else "never started"),
            "invocations": len(self.invocations),
            "exit_code": inv.process.returncode if inv and not self.running else None,
        }


def _signal_group(process: Started, sig: int) -> None:
    on_its_host = getattr(process, "signal_group", None)  # a command on a cluster's host
    if on_its_host is not None:
        on_its_host(sig)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _end_group(pgid: int, marker: bytes, grace_s: float, *, signaled: bool = False) -> None:
    """Ends every process left in the program's group ``pgid``: SIGTERM (unless
    ``signaled`` already), then SIGKILL after ``grace_s`` if any is still there."""
    if not _group_alive(pgid, marker):
        return
    if not signaled:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid, marker):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            break
        time.sleep(_GONE_POLL_S)
    else:
        return
    # SIGKILL is sent, not yet done: a process dies when it next runs, which on a busy host
    # is a while later. The run's end promises its programs gone, so it waits for that, but
    # not for ever (a process in an uninterruptible sleep dies only when that sleep ends).
    deadline = time.monotonic() + KILL_WAIT_S
    while _group_alive(pgid, marker) and time.monotonic() < deadline:
        time.sleep(_GONE_POLL_S)


def _group_alive(pgid: int, marker: bytes) -> bool:
    """Whether a process of the program's group ``pgid`` still runs.

    Zombies do not count: an orphan that died waits for init to reap it, and init is not
    always one that does (containers). Only a process with the program's ``marker`` in its
    environment counts: once the group had emptied, its number may be another's group.
    """
    try:
        os.killpg(pgid, 0)  # a signal to no one: whether any process, zombies too, is in it
    except ProcessLookupError:
        return False  # the usual end, told without reading every process's files
    except PermissionError:
        pass  # a process is in it (another user's): looked at below
    for pid in _passes.live().get(pgid, ()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in b"\0" + environ.read():
                    return True
        except OSError:  # gone meanwhile, or not readable
            continue
    return False


class _Passes:
    """Passes over /proc, shared: each caller gets what a pass begun after it asked found,
    and the callers waiting together share one pass. A run's end asks of every program at
    once, each on a thread of its own; a pass each, the threads taking turns on the GIL,
    was most of the run's end (a pass alone takes 2-3 ms)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.begun = self.done = 0  # passes begun and finished (one at a time)
        self.found: dict[int, list[int]] = {}

    def live(self) -> dict[int, list[int]]:
        """Each process group's processes that are not zombies, by group."""
        with self.changed:
            wanted = self.begun + 1  # the first pass that begins after this call
            while self.done < wanted:
                if self.begun > self.done:  # one under way, begun before: the next one
                    self.changed.wait()
                    continue
                self.begun += 1
                self.changed.release()
                try:
                    found = _live_by_group()
                except BaseException:
                    self.changed.acquire()
                    self.begun -= 1  # as if never begun: a caller waiting begins another
                    self.changed.notify_all()
                    raise
                self.changed.acquire()
                self.done, self.found = self.done + 1, found
                self.changed.notify_all()
            return self.found


def _live_by_group() -> dict[int, list[int]]:
    """One pass over /proc: each process group's processes that are not zombies (every
    process's stat read as bytes with the os module's calls; pathlib's glob and text reads
    took three times as long)."""
    found: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as stat:
                    state, _ppid, group = stat.read().rpartition(b")")[2].split()[:3]
                if state not in (b"Z", b"X"):
                    found.setdefault(int(group), []).append(int(pid))
            except (OSError, ValueError):  # gone meanwhile, or not readable
                continue
    return found


_passes = _Passes()


def _pump(source: IO[bytes] | None, target: Path) -> None:
    """Copies a program's output stream to its file, keeping at most OUTPUT_LIMIT bytes."""
    if source is None:
        return
    kept = dropped = 0
    with target.open("wb") as out:
        while chunk := source.read1(65536):  # type: ignore[attr-defined]
            room = OUTPUT_LIMIT - kept
            if room > 0:
                out.write(chunk[:room])
                out.flush()
            kept += min(room, len(chunk)) if room > 0 else 0
            dropped += max(0, len(chunk) - max(room, 0))
        if dropped:
            out.write(f"\n[nestbed: {dropped} more bytes of output were dropped]\n".encode())
    source.close()
