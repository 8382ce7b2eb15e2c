"""`nestbed exec` and `nestbed shell` through a server (``--server``): a session over the
server's WebSocket (``server.sessions``), the command's output written here as it comes,
its exit status this command's own.

exec passes this command's standard input on when it is not a terminal (a pipe or a
file), else the command reads an empty input, as over ``ssh -n``. shell asks for a pty when
this terminal is one, puts the terminal in raw mode (Ctrl-C and the like go to the node's
shell, not to this command) and passes on its size as it changes; without a terminal the
node's shell reads its commands from the standard input.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from nestbed.cli.active import TIMED_OUT
from nestbed.errors import EnvironmentProblem, UserError

STDOUT, STDERR = 1, 2  # as the server marks its output messages
CHUNK = 65536


def exec_(name: str, node: str, argv: list[str], timeout_s: float | None) -> int:
    """Runs ``argv`` in the node through the server; its exit status."""
    from nestbed.cli.remote import Remote

    remote = Remote()
    piped = not sys.stdin.isatty()
    with remote.client.session(remote.project, name, node) as ws:
        ws.send(json.dumps({"argv": argv, "timeout_s": timeout_s}))
        _send_input(ws, piped)
        return _output(ws, f"{' '.join(argv)} in node {node}", timeout_s)


def shell(name: str, node: str) -> int:
    """An interactive shell in the node through the server; its exit status."""
    from nestbed.cli.remote import Remote

    remote = Remote()
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    cols, rows = _size(tty)
    start = {"tty": tty, "cols": cols, "rows": rows,
             "term": os.environ.get("TERM") or "xterm-256color"}  # fmt: skip
    with remote.client.session(remote.project, name, node) as ws:
        ws.send(json.dumps(start))
        with _raw(tty), _resizing(ws, tty):
            _send_input(ws, True)
            return _output(ws, f"the shell in node {node}", None)


def _send_input(ws: Any, piped: bool) -> None:
    """This command's standard input to the session, in a thread, then its end (at once
    when ``piped`` is false)."""

    def send() -> None:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed, OSError):
            while piped and (data := os.read(sys.stdin.fileno(), CHUNK)):
                ws.send(data)
            ws.send(json.dumps({"eof": True}))

    threading.Thread(target=send, name="session-input", daemon=True).start()


def _output(ws: Any, what: str, timeout_s: float | None) -> int:
    """The session's output written to this command's, until its last message: the exit
    status it carries."""
    from websockets.exceptions import ConnectionClosed

    streams = {STDOUT: sys.stdout.buffer, STDERR: sys.stderr.buffer}
    try:
        for message in ws:
            if isinstance(message, bytes):
                out = streams.get(message[0], sys.stdout.buffer)
                out.write(message[1:])
                out.flush()
                continue
            last = json.loads(message)
            if "error" in last:
                status = int(last.get("status") or 409)
                raise (EnvironmentProblem if status >= 500 else UserError)(last["error"])
            if last.get("timed_out"):
                sys.stderr.write(f"nestbed: {what} ran out of its {timeout_s:g} s; stopped\n")
                return TIMED_OUT
            return int(last["exit"])
    except ConnectionClosed:
        pass
    raise EnvironmentProblem(f"the server closed the session of {what} before its end")


def _size(tty: bool) -> tuple[int, int]:
    """This terminal's columns and rows, as the terminal says (not $COLUMNS, which a
    resize leaves behind)."""
    if tty:
        with contextlib.suppress(OSError):
            return tuple(os.get_terminal_size(sys.stdout.fileno()))  # type: ignore[return-value]
    return tuple(shutil.get_terminal_size())  # type: ignore[return-value]


@contextlib.contextmanager
def _raw(tty: bool) -> Iterator[None]:
    """This terminal in raw mode while the remote shell has it."""
    if not tty:
        yield
        return
    import termios
    import tty as ttys

    fd = sys.stdin.fileno()
    before = termios.tcgetattr(fd)
    ttys.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, before)


@contextlib.contextmanager
def _resizing(ws: Any, tty: bool) -> Iterator[None]:
    """Tells the session this terminal's new size at each SIGWINCH."""
    if not tty:
        yield
        return

    def resized(_signum: int, _frame: Any) -> None:
        cols, rows = _size(tty)
        with contextlib.suppress(Exception):
            ws.send(json.dumps({"resize": [cols, rows]}))

    before = signal.signal(signal.SIGWINCH, resized)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, before)
