"""Commands running in nodes on other hosts, seen from the controlling machine as
``subprocess.Popen`` objects (``RemoteProcess``): poll, wait, communicate, signals, and their
output streamed into the files or pipes the caller gave, as a local command's would be.

One ``Poller`` per back end asks every host with running commands for all of them in one Dask
task per host (``remote.poll``), ten times a second: the traffic grows with the hosts, not the
commands. A command's input (``Feed``, its ``stdin``) goes with those polls too. A command's
files (paths its argv names under its stdout's folder) are written back at their own paths
when it ends, before it is seen to end.

A command given a terminal (its stdin a tty: a server session's pty, or the terminal
`nestbed shell` runs in) gets a pty of its own on its host (``remote._Terminal``); the
terminal here only carries bytes (``Terminal``): raw while the command has it, its input
the command's input, the command's output written to it, its window size sent with each
poll (a resize here is one there). While one is attached a key typed into it starts a round
at once, and the rounds come ``TERMINAL_POLL_S`` apart while it is busy, so a keystroke's
echo and a command's output come back soon (``Poller.rest``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import subprocess
import termios
import threading
import time
import tty
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from nestbed.backend.cluster.remote import INPUT_BYTES, Size
from nestbed.backend.cluster.rounds import Rounds
from nestbed.errors import InternalError

POLL_S = 0.1
TERMINAL_POLL_S = 0.02  # the rounds' pause while an attached terminal is busy
BUSY_S = 1.0  # a terminal typed into or printed to this recently is busy
# A host that cannot be asked this many times in a row (its agent gone, the scheduler busy)
# has lost its commands; a failure or two in between is no loss.
LOST_AFTER_FAILURES = 30
START_TIMEOUT_S = 60  # a command its host has not started this long after it was asked to
LOST = -signal.SIGKILL  # the exit status of a command whose host forgot it (agent died)

# Runs remote.poll on each host with its commands' offsets; each host's answer or exception.
PollHosts = Callable[[dict[str, dict[str, tuple[int, int]]]], dict[str, Any]]


class _Sink:
    """Where one output stream of a remote command goes: a file the caller opened (its
    descriptor duplicated, since the caller may close its own), a pipe the caller reads, or
    nowhere. Writes never block the poller: what a full pipe does not take waits."""

    def __init__(self, fd: int | None):
        self.fd, self.pending, self.received = fd, b"", 0

    def write(self, data: bytes) -> None:
        self.received += len(data)
        if self.fd is None:
            return
        self.pending += data
        while self.pending:
            try:
                self.pending = self.pending[os.write(self.fd, self.pending) :]
            except BlockingIOError:
                return
            except OSError as exc:  # the reader went away: nobody wants the rest
                if exc.errno != errno.EPIPE:
                    raise
                self.pending = b""

    def close(self) -> None:
        if self.fd is not None:
            if self.pending:
                os.set_blocking(self.fd, True)
                with contextlib.suppress(OSError):
                    os.write(self.fd, self.pending)
            os.close(self.fd)
            self.fd = None


class Terminal:
    """A terminal here given to a command on another host: raw (no echo, no line editing,
    no signals from its keys: the host's pty does all that) and non-blocking while the
    command has it, as it was afterwards."""

    def __init__(self, fd: int):
        self.fd = os.dup(fd)
        self.was = termios.tcgetattr(self.fd)
        self.blocking = os.get_blocking(self.fd)
        tty.setraw(self.fd, termios.TCSANOW)  # what was typed ahead is kept
        os.set_blocking(self.fd, False)
        self.busy_at = time.monotonic()  # when it was last typed into or printed to

    def size(self) -> Size:
        cols, rows = os.get_terminal_size(self.fd)
        return cols, rows

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):  # the terminal may be gone already
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self.was)
                os.set_blocking(self.fd, self.blocking)
            os.close(self.fd)
            self.fd = -1


class Feed:
    """The input of a remote command: what the caller writes into the proxy's ``stdin`` (a
    pipe, as a local command's) is read from its other end each round and sent with the
    poll (``remote.Given``), from the first byte its host has not said it received; no more
    while its host still holds ``remote.INPUT_BYTES`` unwritten. Closing ``stdin`` ends the
    input there once all of it is written; once the command no longer reads (its host says
    so), this end closes too, and the caller's writes fail as a local pipe's would."""

    def __init__(self, text: bool, terminal: Terminal | None = None):
        self.stdin: IO | None = None  # a terminal's input is typed into it, not written here
        if terminal is not None:
            read = os.dup(terminal.fd)  # non-blocking, as the terminal is made
        else:
            read, write = os.pipe()
            os.set_blocking(read, False)
            with contextlib.suppress(OSError):  # a round takes this much at once
                fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, INPUT_BYTES)
            self.stdin = os.fdopen(write, "w" if text else "wb")
        self.fd: int | None = read
        self.unsent = b""  # read from the pipe, not yet said received by the host
        self.at = 0  # the offset of ``unsent`` in the whole input: what the host received
        self.held = 0  # what the host still holds unwritten, as it last said
        self.ended = False  # the caller closed its end

    def given(self) -> tuple[int, bytes, bool] | None:
        """What to send with this round's poll, if anything."""
        if self.fd is None:
            return None
        room = INPUT_BYTES - self.held - len(self.unsent)
        while room > 0 and not self.ended:
            try:
                chunk = os.read(self.fd, room)
            except BlockingIOError:
                break
            except OSError:  # EIO: a terminal whose other end closed, as an end of file
                chunk = b""
            if not chunk:
                self.ended = True
                break
            self.unsent += chunk
            room -= len(chunk)
        return (self.at, self.unsent, self.ended)

    def answered(self, received: int, held: int, reading: bool) -> None:
        """What the host said of the input: bytes received, of them unwritten, and whether
        the command still takes input."""
        self.unsent = self.unsent[max(0, received - self.at) :]
        self.at, self.held = max(self.at, received), held
        if not reading:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def sink_and_reader(target: Any, text: bool) -> tuple[_Sink, IO | None]:
    """The sink for a Popen ``stdout``/``stderr`` argument, and the stream the caller reads
    (for PIPE)."""
    if target == subprocess.PIPE:
        read, write = os.pipe()
        os.set_blocking(write, False)
        return _Sink(write), os.fdopen(read, "r" if text else "rb")
    if target is None or target == subprocess.DEVNULL:
        return _Sink(None), None
    fd = target if isinstance(target, int) else target.fileno()
    return _Sink(os.dup(fd)), None


class RemoteProcess:
    """A command in a node on ``host``, as a Popen."""

    def __init__(
        self,
        poller: Poller,
        host: str,
        key: str,
        started: Any,
        args: list[str],
        sinks: tuple[_Sink, _Sink],
        readers: tuple[IO | None, IO | None],
        signal_host: Callable[[str, str, int, bool], None],
        feed: Feed | None = None,
        terminal: Terminal | None = None,
    ):
        self.poller, self.host, self.key, self.args = poller, host, key, args
        self.started = started  # a future of the command's pid on its host
        self.since = time.monotonic()
        self.sinks = sinks
        self.stdout, self.stderr = readers
        self.feed = feed
        self.stdin = None if feed is None else feed.stdin
        self.terminal = terminal
        self.returncode: int | None = None
        self.ended = threading.Event()
        self.changed = threading.Condition()  # a port heard listening, or the end
        self.heard: set[tuple[int, str]] = set()  # (port, proto) bound in its node
        self._signal_host = signal_host
        self._exit_writers: list[int] = []  # closed at its end (``exit_fd``)

    @property
    def pid(self) -> int:
        """Its pid on its host (waits until the host started it)."""
        return self.started.result()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        assert self.returncode is not None
        return self.returncode

    def communicate(
        self,
        input: Any = None,  # noqa: A002 -- Popen's name for it
        timeout: float | None = None,
    ) -> tuple[Any, Any]:
        found: dict[int, Any] = {}

        def drain(i: int, stream: IO | None) -> None:
            found[i] = stream.read() if stream is not None else None

        readers = [threading.Thread(target=drain, args=(i, s), daemon=True)
                   for i, s in enumerate((self.stdout, self.stderr))]  # fmt: skip
        for reader in readers:
            reader.start()
        if self.stdin is not None and not self.stdin.closed:  # its output read meanwhile
            with contextlib.suppress(BrokenPipeError):  # it stopped reading: as Popen's
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        return found[0], found[1]

    def exit_fd(self) -> int:
        """A descriptor (the caller's to close) readable once the command has ended here,
        as a pidfd of a local command is: its end of a pipe whose other end closes then."""
        read, write = os.pipe()
        with self.changed:
            if self.returncode is None:
                self._exit_writers.append(write)
                return read
        os.close(write)
        return read

    def wait_listening(self, port: int, proto: str, timeout: float) -> None:
        """Waits until a round found ``port`` bound in the command's node while it ran (the
        waits of many commands are answered by the same rounds, rather than one request
        each)."""
        with self.changed:
            self.changed.wait_for(
                lambda: (port, proto) in self.heard or self.returncode is not None, timeout
            )
        command = " ".join(self.args)
        if (port, proto) in self.heard:
            return
        if self.returncode is not None:
            raise InternalError(f"{command} exited with {self.returncode} at start")
        raise InternalError(f"{command} did not open {proto} port {port} in {timeout} s")

    def send_signal(self, sig: int) -> None:
        self._send(sig, False)

    def signal_group(self, sig: int) -> None:
        """Signals the command's whole process group (it was started in its own session)."""
        self._send(sig, True)

    def _send(self, sig: int, group: bool) -> None:
        try:
            self.started.result()  # a signal sent before the start would be lost
        except Exception:
            return  # it never started: the poller ends it
        if self.returncode is None:
            self._signal_host(self.host, self.key, sig, group)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def deliver(self, report: dict[str, Any]) -> None:
        """What the host said of the command in the last poll."""
        if report.get("lost"):
            why = report.get("why", "its agent does not know it (did the agent restart?)")
            said = f"\n[nestbed: host {self.host} lost this command: {why}]\n"
            self.sinks[1].write(said.encode())
            self._end(LOST)
            return
        self.sinks[0].write(report["out"])
        self.sinks[1].write(report["err"])
        if self.terminal is not None and report["out"]:
            self.terminal.busy_at = time.monotonic()
        if self.feed is not None and "input" in report:
            self.feed.answered(*report["input"])
        if report.get("listening"):
            with self.changed:
                self.heard.update((port, proto) for port, proto in report["listening"])
                self.changed.notify_all()
        if report["code"] is not None:
            for path, data in report.get("files", {}).items():
                Path(path).write_bytes(data)
            self._end(report["code"])

    def _end(self, code: int) -> None:
        for sink in self.sinks:
            sink.close()
        if self.feed is not None:
            self.feed.close()
        if self.terminal is not None:
            self.terminal.close()
        with self.changed:
            self.returncode = code
            self.changed.notify_all()
            for fd in self._exit_writers:
                os.close(fd)
            self._exit_writers.clear()
        self.poller.forget(self)
        self.ended.set()

    def __enter__(self) -> RemoteProcess:
        return self

    def __exit__(self, *_: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class Poller(Rounds):
    """Asks the hosts about every running remote command, POLL_S apart, while there are any."""

    def __init__(self, poll_hosts: PollHosts):
        super().__init__("remote", POLL_S, poll_hosts)
        self.failures: dict[str, int] = {}  # host -> polls in a row that failed

    def ready(self, thing: Any) -> bool:
        """Once its host started it; a start that failed or never came ends it."""
        if not thing.started.done():
            if time.monotonic() - thing.since > START_TIMEOUT_S:
                why = f"it was not started within {START_TIMEOUT_S} s"
                thing.deliver({"lost": True, "why": why})
            return False
        if thing.started.status != "finished":
            try:
                thing.started.result()
            except Exception as exc:
                why = f"it could not start: {type(exc).__name__}: {exc}"
            else:  # cancelled
                why = "its start was cancelled"
            thing.deliver({"lost": True, "why": why})
            return False
        return True

    def rest(self) -> None:
        """``POLL_S``; with a terminal attached, cut short by a key typed into it, and only
        ``TERMINAL_POLL_S`` while one was busy (typed into, or printed to) in the last
        ``BUSY_S``: an idle shell costs no more rounds than any command."""
        with self.lock:
            terminals = [t.terminal for t in self.kept.values() if t.terminal is not None]
        if not terminals:
            time.sleep(self.pause_s)
            return
        time.sleep(TERMINAL_POLL_S)
        if any(time.monotonic() - t.busy_at < BUSY_S for t in terminals):
            return
        with contextlib.suppress(OSError, ValueError):  # one closed meanwhile: a round now
            select.select([t.fd for t in terminals], [], [], self.pause_s - TERMINAL_POLL_S)

    def question(self, thing: Any) -> tuple[int, int, Any, Size | None]:
        """The output had so far, input for it (``Feed``) and its terminal's size."""
        given = None if thing.feed is None else thing.feed.given()
        size = None
        if thing.terminal is not None:
            if given is not None and given[1]:
                thing.terminal.busy_at = time.monotonic()
            with contextlib.suppress(OSError):  # a terminal gone: its size as last sent
                size = thing.terminal.size()
        return (thing.sinks[0].received, thing.sinks[1].received, given, size)

    def answered(self, host: str, answer: Any, things: dict[str, Any]) -> None:
        if isinstance(answer, BaseException):
            self.failures[host] = self.failures.get(host, 0) + 1
            if self.failures[host] >= LOST_AFTER_FAILURES:
                why = f"{type(answer).__name__}: {answer}"
                for process in things.values():
                    process.deliver({"lost": True, "why": why})
            return
        self.failures[host] = 0
        for key, process in things.items():
            process.deliver(answer[key])
