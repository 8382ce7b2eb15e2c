"""Commands a controller on another machine started in this host's nodes, kept by the host's
agent (run on the agent; ``proxy`` is the controller's side).

Each command gets a scratch folder in the experiment's state folder on this host: its stdout
and stderr go to files there, and so do the files its argv names on the controlling machine
(a probe's log): the agent rewrites those paths to the scratch folder. A program starts in
its node's working folder of the run on this host (``workdirs``); a confined one's files are
in a folder of its own beside it, since it may not enter the state folder.
``poll`` hands back, for many commands at once, their exit status and the output written
since the last poll; once a command has ended, also its files, and forgets it. An agent that
dies forgets its commands (swap-out still ends them, by namespace); the controller's side
then says so.

A command the controller gave a terminal gets one here (``_Terminal``): a pty whose slave
end is its stdin, stdout and stderr (its ``setsid --ctty``, the caller's as on one machine,
makes it its controlling terminal). What it prints is drained from the master into its
stdout file each poll, so the poll's offsets carry it as any command's output; its input is
the master's (``_Input``, as a pipe's), and the window size the controller sends with a
poll is set on the master (TIOCSWINSZ: the command's foreground group gets SIGWINCH).

Sockets opened in the host's nodes (linktest's datagrams) stay here too: the controller asks
them to send, and drains what they received.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nestbed.backend import linux, terminals
from nestbed.backend.cluster import workdirs
from nestbed.backend.plan import Plan
from nestbed.backend.sockets import bound_ports
from nestbed.errors import UserError

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

CHUNK_BYTES = 1 << 20  # at most this much of each stream per poll, so replies stay small
# A command's input not yet written kept here at most (the controller sends no more while
# this much waits), and the size asked of its stdin pipe, so a poll can hand it this much.
INPUT_BYTES = 1 << 20
# Input for a command, as the controller sends it with a poll: the offset of its first
# byte in the whole input, the bytes, and whether the input ends after them.
Given = tuple[int, bytes, bool]
# A terminal's window size, as the controller sends it: columns and rows.
Size = tuple[int, int]
# How long a poll that wrote input to a terminal waits for its echo, so a keystroke's echo
# comes back in the same round, not the next one.
ECHO_WAIT_S = 0.02


class _Input:
    """A command's stdin, fed from what the controller sends with its polls (``Given``).
    What the pipe does not take at once waits here until the next poll; a part sent twice
    (its answer was lost) is written once, by its offset. The pipe is closed once the input
    ended and all of it was written, or when the command no longer reads it."""

    def __init__(self, fd: int):
        self.fd: int | None = fd
        os.set_blocking(fd, False)
        with contextlib.suppress(OSError):  # a bigger pipe: a poll hands over more
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, INPUT_BYTES)
        self.pending, self.received, self.end = b"", 0, False

    def take(self, given: Given | None) -> None:
        if given is not None and self.fd is not None:
            at, data, end = given
            new = data[max(0, self.received - at) :] if at <= self.received else b""
            self.pending += new
            self.received += len(new)
            self.end = self.end or (end and at + len(data) == self.received)
        self.write()

    def write(self) -> None:
        """Writes what the pipe takes without waiting."""
        try:
            while self.pending and self.fd is not None:
                self.pending = self.pending[os.write(self.fd, self.pending) :]
        except BlockingIOError:
            return
        except OSError:  # EPIPE: it closed its input or ended; the rest goes nowhere
            self.pending, self.end = b"", True
        if self.end and not self.pending:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def state(self) -> tuple[int, int, bool]:
        """Bytes received so far, of them still waiting here, and whether it takes more."""
        return self.received, len(self.pending), self.fd is not None


class _Terminal:
    """A command's pty on this host: its master end, drained into the command's stdout
    file, and the window size last set on it."""

    def __init__(self, size: Size):
        self.master, self.slave = os.openpty()
        os.set_blocking(self.master, False)
        self.size: Size | None = None
        self.resize(size)

    def resize(self, size: Size | None) -> None:
        if size is not None and size != self.size and self.master >= 0:
            terminals.resize(self.master, *size)
            self.size = size

    def drain(self, into: Path, ended: bool, wait_s: float = 0.0) -> None:
        """Appends what the command printed to ``into``: at most ``CHUNK_BYTES`` while it
        runs (a command printing without end waits for its pty, not the host's disk), all
        of it once it has ended. ``wait_s``: how long to wait for the first byte."""
        if self.master < 0:
            return
        if wait_s > 0:
            select.select([self.master], [], [], wait_s)
        got, left = [], None if ended else CHUNK_BYTES
        while left is None or left > 0:
            try:
                chunk = os.read(self.master, CHUNK_BYTES if left is None else left)
            except (BlockingIOError, OSError):  # nothing more now; EIO: the slave is gone
                break
            if not chunk:
                break
            got.append(chunk)
            if left is not None:
                left -= len(chunk)
        if got:
            with into.open("ab") as f:
                f.write(b"".join(got))

    def close(self) -> None:
        for fd in (self.master, self.slave):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.master = self.slave = -1


PACE_SLEEP_S = 0.0005  # a drain's sends closer than this to their time go at once


@dataclass
class _Command:
    process: subprocess.Popen
    scratch: Path  # its stdout and stderr
    written: Path  # where its files are: ``scratch``, or a confined command's own folder
    files: dict[str, str]  # path on the controlling machine -> its name in ``written``
    group: bool  # started in a session of its own: signals reach its whole group
    input: _Input | None = None  # its stdin, if the controller streams one
    terminal: _Terminal | None = None  # its pty, if the controller gave it a terminal


_commands: dict[str, _Command] = {}
_lock = threading.Lock()


def start(
    key: str,
    p: Plan,
    node: str,
    argv: list[str],
    files: dict[str, str],
    env: dict[str, str],
    group: bool,
    work: tuple[str, RunAs | None] | None = None,
    cwd: str | None = None,
    stdin: bool = False,
    terminal: Size | None = None,
) -> int:
    """Starts ``argv`` in ``node`` as command ``key`` (for ``poll``); its pid on this host.
    ``env`` is what the controller changed of its environment. ``work`` is a node's
    working folder on the controlling machine (a confined command's HOME, or the folder an
    unconfined program starts in) and its identity (None: unconfined): the command starts
    in the node's working folder on this host instead (``workdirs``), and so does a ``cwd``
    naming it. A ``cwd`` this host does not have is the caller's error. With ``stdin`` the
    command reads what the controller sends with its polls (``Given``), else nothing; with
    a ``terminal`` (its window size) it gets a pty instead, which that input goes to
    (``_Terminal``)."""
    run_as = None
    if work is None:
        whole = {**os.environ, **env}
    else:
        home, run_as = work
        there = workdirs.prepare(p.experiment, node, home, run_as)
        argv, whole, cwd = workdirs.moved(argv, env, home, there, cwd, confined=bool(run_as))
    if cwd is not None and not Path(cwd).is_dir():
        raise UserError(f"node {node}'s host has no folder {cwd}; start the command in a "
                        "folder that host has")  # fmt: skip
    scratch = linux.run_dir(p) / "commands" / key
    scratch.mkdir(parents=True, mode=0o700)
    written = scratch
    if run_as is not None and files:  # it may not enter the scratch folder, root's alone
        written = workdirs.command_folder(p.experiment, home, key, run_as, files.values())
    mapped = [str(written / files[a]) if a in files else a for a in argv]
    pty = None if terminal is None else _Terminal(terminal)
    try:
        with (scratch / "stdout").open("wb") as out, (scratch / "stderr").open("wb") as err:
            ends: dict[str, Any] = {
                "stdout": out, "stderr": err,
                "stdin": subprocess.PIPE if stdin else subprocess.DEVNULL,
            }  # fmt: skip
            if pty is not None:
                ends = dict.fromkeys(("stdin", "stdout", "stderr"), pty.slave)
            process = linux.start_in(p, node, mapped, **ends, env=whole,
                                     start_new_session=group, cwd=cwd)  # fmt: skip
    except BaseException:
        if pty is not None:
            pty.close()
        raise
    given = None
    if pty is not None:  # the command holds the slave end now; its input is the master's
        os.close(pty.slave)
        pty.slave = -1
        given = _Input(os.dup(pty.master))
    elif process.stdin is not None:  # its descriptor is the input's from now on
        given = _Input(os.dup(process.stdin.fileno()))
        process.stdin.close()
    # A terminal's command leads its own session (``setsid --ctty``): its group is its own.
    leads = group or pty is not None
    with _lock:
        _commands[key] = _Command(process, scratch, written, files, leads, given, pty)
    return process.pid


def poll(
    asked: dict[str, tuple[int, int, Given | None, Size | None]],
) -> dict[str, dict[str, Any]]:
    """For each command (key -> bytes of stdout and stderr already handed back, input for
    it and its terminal's window size, if any): its exit status (None while it runs), its
    new output, the ports bound in its node while it runs (so a wait for it to listen is
    answered even if it has ended since), the state of its input (``_Input.state``), and,
    once ended, its files; a command this agent does not know is ``lost``."""
    found: dict[str, dict[str, Any]] = {}
    for key, (out_at, err_at, given, size) in asked.items():
        with _lock:
            command = _commands.get(key)
        if command is None:
            found[key] = {"lost": True}
            continue
        if command.terminal is not None:  # before the input: a line typed after a resize
            command.terminal.resize(size)  # sees the new size
        if command.input is not None:
            command.input.take(given)
        code = command.process.poll()  # before reading: an ended command wrote everything
        if command.terminal is not None:
            typed = given is not None and bool(given[1]) and code is None
            command.terminal.drain(command.scratch / "stdout", code is not None,
                                   ECHO_WAIT_S if typed else 0.0)  # fmt: skip
        limit = None if code is not None else CHUNK_BYTES
        report: dict[str, Any] = {
            "code": code,
            "out": _read(command.scratch / "stdout", out_at, limit),
            "err": _read(command.scratch / "stderr", err_at, limit),
            "listening": sorted(bound_ports(command.process.pid)) if code is None else [],
        }
        if command.input is not None:
            if code is not None:
                command.input.close()
            report["input"] = command.input.state()
        if code is not None:
            report["files"] = {
                path: (command.written / name).read_bytes()
                for path, name in command.files.items()
                if (command.written / name).exists()
            }
            with _lock:
                _commands.pop(key, None)
            if command.terminal is not None:
                command.terminal.close()
            shutil.rmtree(command.scratch, ignore_errors=True)
            shutil.rmtree(command.written, ignore_errors=True)
        found[key] = report
    return found


def _read(path: Path, offset: int, limit: int | None) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(-1 if limit is None else limit)


def send_signal(key: str, sig: int, group: bool) -> None:
    """Signals a command (with ``group``, its whole process group, if it has its own)."""
    with _lock:
        command = _commands.get(key)
    if command is None or command.process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if group and command.group:
            with contextlib.suppress(ProcessLookupError):  # a terminal's, not its own group
                os.killpg(command.process.pid, sig)
                return
        command.process.send_signal(sig)


def forget(experiment_dir: Path) -> None:
    """Drops the commands of an experiment whose state folder goes (at swap-out)."""
    with _lock:
        for key in [k for k, c in _commands.items() if c.scratch.is_relative_to(experiment_dir)]:
            command = _commands.pop(key)
            if command.input is not None:
                command.input.close()
            if command.terminal is not None:
                command.terminal.close()
            if command.process.poll() is None:
                command.process.send_signal(signal.SIGKILL)
            command.process.wait()


# -- sockets in this host's nodes, for a controller elsewhere (``datagrams`` is its side) --

_sockets: dict[str, socket.socket] = {}


def socket_open(p: Plan, node: str, kind: socket.SocketKind) -> str:
    """Opens an IPv4 socket of ``kind`` in ``node``; its key."""
    key = uuid.uuid4().hex[:16]
    sock = linux.open_socket(p, node, kind)
    sock.setblocking(False)
    with _lock:
        _sockets[key] = sock
    return key


def socket_call(key: str, method: str, args: tuple[Any, ...]) -> Any:
    """``sock.METHOD(*args)`` on an open socket: setsockopt, bind or close."""
    if method not in ("setsockopt", "bind", "close"):
        raise ValueError(f"a remote socket does not {method}")
    with _lock:
        sock = _sockets.pop(key) if method == "close" else _sockets[key]
    return getattr(sock, method)(*args)


def socket_drain(
    sends: dict[str, list[tuple[bytes, tuple[str, int], float]]],
) -> dict[str, list[bytes]]:
    """Sends what each socket was given to send since the last drain (key -> datagrams, their
    addresses and when the controller asked for each; unreachable is an answer, not an
    error), all sockets' in the order asked and as far apart, then hands back the datagrams
    each has received."""
    with _lock:
        sockets = {key: _sockets.get(key) for key in sends}
    asked = sorted((at, key, data, address) for key, datagrams in sends.items()
                   for data, address, at in datagrams if sockets[key] is not None)  # fmt: skip
    began = time.monotonic()
    for at, key, data, address in asked:
        ahead = at - asked[0][0] - (time.monotonic() - began)
        if ahead > PACE_SLEEP_S:  # a shorter sleep would take longer than asked
            time.sleep(ahead)
        with contextlib.suppress(OSError):
            sockets[key].sendto(data, address)  # type: ignore[union-attr]
    found: dict[str, list[bytes]] = {}
    for key, sock in sockets.items():
        got = found[key] = []
        if sock is None:
            continue
        while True:
            try:
                got.append(sock.recv(65536))
            except OSError:  # BlockingIOError: nothing more has arrived
                break
    return found
