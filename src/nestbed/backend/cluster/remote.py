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

Sockets opened in the host's nodes (linktest's datagrams) stay here too: the controller asks
them to send, and drains what they received.
"""

from __future__ import annotations

import contextlib
import os
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

from nestbed.backend import linux
from nestbed.backend.cluster import workdirs
from nestbed.backend.plan import Plan
from nestbed.backend.sockets import bound_ports
from nestbed.errors import UserError

if TYPE_CHECKING:
    from nestbed.model.options import RunAs

CHUNK_BYTES = 1 << 20  # at most this much of each stream per poll, so replies stay small
PACE_SLEEP_S = 0.0005  # a drain's sends closer than this to their time go at once


@dataclass
class _Command:
    process: subprocess.Popen
    scratch: Path  # its stdout and stderr
    written: Path  # where its files are: ``scratch``, or a confined command's own folder
    files: dict[str, str]  # path on the controlling machine -> its name in ``written``
    group: bool  # started in a session of its own: signals reach its whole group


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
) -> int:
    """Starts ``argv`` in ``node`` as command ``key`` (for ``poll``); its pid on this host.
    ``env`` is what the controller changed of its environment. ``work`` is a node's
    working folder on the controlling machine (a confined command's HOME, or the folder an
    unconfined program starts in) and its identity (None: unconfined): the command starts
    in the node's working folder on this host instead (``workdirs``), and so does a ``cwd``
    naming it. A ``cwd`` this host does not have is the caller's error."""
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
    with (scratch / "stdout").open("wb") as out, (scratch / "stderr").open("wb") as err:
        process = linux.start_in(
            p, node, mapped, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
            env=whole, start_new_session=group, cwd=cwd,
        )  # fmt: skip
    with _lock:
        _commands[key] = _Command(process, scratch, written, files, group)
    return process.pid


def poll(offsets: dict[str, tuple[int, int]]) -> dict[str, dict[str, Any]]:
    """For each command (key -> bytes of stdout and stderr already handed back): its exit
    status (None while it runs), its new output, the ports bound in its node while it runs
    (so a wait for it to listen is answered even if it has ended since), and, once ended,
    its files; a command this agent does not know is ``lost``."""
    found: dict[str, dict[str, Any]] = {}
    for key, (out_at, err_at) in offsets.items():
        with _lock:
            command = _commands.get(key)
        if command is None:
            found[key] = {"lost": True}
            continue
        code = command.process.poll()  # before reading: an ended command wrote everything
        limit = None if code is not None else CHUNK_BYTES
        report: dict[str, Any] = {
            "code": code,
            "out": _read(command.scratch / "stdout", out_at, limit),
            "err": _read(command.scratch / "stderr", err_at, limit),
            "listening": sorted(bound_ports(command.process.pid)) if code is None else [],
        }
        if code is not None:
            report["files"] = {
                path: (command.written / name).read_bytes()
                for path, name in command.files.items()
                if (command.written / name).exists()
            }
            with _lock:
                _commands.pop(key, None)
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
    try:
        if group and command.group:
            os.killpg(command.process.pid, sig)
        else:
            command.process.send_signal(sig)
    except ProcessLookupError:
        pass


def forget(experiment_dir: Path) -> None:
    """Drops the commands of an experiment whose state folder goes (at swap-out)."""
    with _lock:
        for key in [k for k, c in _commands.items() if c.scratch.is_relative_to(experiment_dir)]:
            command = _commands.pop(key)
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
