"""The JSON-lines control sockets of nestbed's daemons (nestbed-linkd, the controller): a
client, and starting a daemon then waiting until its socket answers."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nestbed.errors import InternalError, UserError


class SocketClient:
    """JSON-lines client of a nestbed daemon's Unix socket (nestbed-linkd, the controller).

    A refusal the daemon marks ``"user": true`` is the user's mistake (UserError); any other
    is an internal one.
    """

    def __init__(self, path: Path, what: str = "nestbed-linkd", timeout: float | None = None):
        self.path, self.what = path, what
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(str(path))
        except BaseException:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("r", encoding="utf-8")

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self.sock.sendall(request_line(op, **fields))
        return reply(self.reader.readline(), op, self.what, self.path)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def __enter__(self) -> SocketClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def request_line(op: str, **fields: Any) -> bytes:
    """One request as the daemons read it: a JSON object on one line."""
    return (json.dumps({"op": op, **fields}) + "\n").encode()


def reply(line: str | bytes, op: str, what: str, path: Path) -> dict[str, Any]:
    """A daemon's reply line to ``op`` (empty: it closed the socket first); a refusal raised,
    the user's (UserError) where the daemon marks it ``"user": true``."""
    if not line:
        raise InternalError(f"{what} at {path} closed its control socket")
    answer = json.loads(line)
    if not answer.get("ok"):
        if answer.get("user"):
            raise UserError(str(answer.get("error")))
        raise InternalError(f"{what} refused {op}: {answer.get('error')}")
    return dict(answer)


def answers(path: Path, what: str, timeout: float = 5) -> bool:
    """Whether a daemon answers a ping on its socket now."""
    try:
        with SocketClient(path, what, timeout=timeout) as client:
            client.request("ping")
            return True
    except (OSError, ValueError, UserError, InternalError):
        return False


def _listens(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def start_daemon(
    argv: Sequence[str],
    sock: Path,
    log: Path,
    what: str,
    *,
    timeout_s: float,
    ping: bool,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen:
    """Starts a daemon in its own session, its output appended to ``log``, and waits until
    it listens on ``sock`` (and, with ``ping``, answers); the daemon's last log line if it exits
    first, an InternalError naming the log if it never comes up. ``pass_fds`` stay open in
    the daemon (a lock it inherits)."""
    process = spawn_daemon(argv, sock, log, pass_fds=pass_fds)
    wait_daemon(process, sock, log, what, timeout_s=timeout_s, ping=ping)
    return process


def spawn_daemon(
    argv: Sequence[str],
    sock: Path,
    log: Path,
    *,
    pass_fds: Sequence[int] = (),
    stdin: int = subprocess.DEVNULL,
) -> subprocess.Popen:
    """Starts a daemon in its own session, its output appended to ``log``, without waiting
    for it (``wait_daemon`` does)."""
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    with log.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=out,
            stderr=out,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )


def _status(code: int) -> str:
    """A process's end as a person reads it: its exit code, or the signal that ended it."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def wait_daemon(
    process: subprocess.Popen, sock: Path, log: Path, what: str, *, timeout_s: float, ping: bool
) -> None:
    """Waits until a daemon listens on ``sock`` (and, with ``ping``, answers), as
    ``start_daemon`` does. Its file existing is not enough: it appears at bind(), a moment
    before the daemon listens, when a connection is still refused."""
    deadline = time.monotonic() + timeout_s
    pause = 0.002
    while True:
        if process.poll() is not None:
            lines = log.read_text(errors="replace").strip().splitlines()
            said = lines[-1] if lines else "no output"
            raise InternalError(f"{what} exited at start ({_status(process.returncode)}): {said}")
        if sock.exists() and (answers(sock, what) if ping else _listens(sock)):
            return
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise InternalError(f"{what} did not start within {timeout_s:g} s; see {log}")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def listens(pid: int, port: int, proto: str) -> bool:
    """Whether a ``proto`` socket is bound to ``port`` in process ``pid``'s network
    namespace (for TCP: listening)."""
    return (port, proto) in bound_ports(pid, (proto,))


def bound_ports(pid: int, protos: tuple[str, ...] = ("udp", "tcp")) -> set[tuple[int, str]]:
    """The (port, proto) of every UDP socket and listening TCP socket in process ``pid``'s
    network namespace (/proc/PID/net shows the sockets of the process's namespace)."""
    found = set()
    for proto in protos:
        try:
            lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for cols in (line.split() for line in lines):
            # local address is the second column; TCP must be in LISTEN (0A)
            if proto != "tcp" or cols[3] == "0A":
                found.add((int(cols[1].rsplit(":", 1)[1], 16), proto))
    return found


def wait_listening(process: subprocess.Popen, port: int, proto: str, timeout: float = 5) -> None:
    """Waits until ``process`` (in whatever namespace) has a ``proto`` socket bound to ``port``.

    /proc/PID/net shows the sockets of the process's own network namespace.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            command = shlex.join(process.args)
            raise InternalError(f"{command} exited with {process.returncode} at start")
        if listens(process.pid, port, proto):
            return
        time.sleep(0.002)
    command = shlex.join(process.args)
    raise InternalError(f"{command} did not open {proto} port {port} in {timeout} s")
