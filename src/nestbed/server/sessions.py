"""Exec and shell sessions in a node of a live experiment, through the server: what
`nestbed exec --server` and `nestbed shell --server` and the portal's web terminal use, so
a user without root reaches their nodes on a shared machine.

One WebSocket per session, ``/v1/projects/{project}/experiments/{name}/nodes/{node}/session``:

* **Who.** A bearer token (``Authorization: Bearer TOKEN``: the CLI), or the portal's
  session cookie, accepted only from a page of this server: a browser sends no CSRF header
  on a WebSocket, so its ``Origin`` must be the server's own (``Host``); a page of another
  site is refused (403) before anything opens. Then the caller and the experiment are
  checked as on every route (``owned_experiment``: a project the caller is not in is 404),
  and the session is audited (``session``, with the command; ``session.end``, with its exit).
* **How it runs.** Exactly as the experiment's programs on this server: in the node's
  namespace and cgroup, as the project's identity through ``setpriv`` (no groups, no
  capabilities, no new privileges; ``backend.confine.user_command``, the controller's code for
  its programs too), with the environment cut to what programs get and ``HOME`` the node's
  working folder of the current run. A trusted project's sessions run as root, as its
  programs do.
* **Protocol.** The client's first message is JSON text (``Start``): ``argv`` (none: the
  node's shell), ``tty`` (a pty, for a shell), ``cols``/``rows``, ``term`` and
  ``timeout_s``. Then its binary messages are the command's input, and its text messages
  JSON: ``{"resize": [COLS, ROWS]}``, ``{"eof": true}``. The server sends binary messages
  of one byte of stream (1 stdout, 2 stderr; a pty has only 1) then the bytes, and ends
  with one text message: ``{"exit": STATUS}`` (128 + N for signal N, like a shell; with
  ``"timed_out": true`` after ``timeout_s``) or ``{"error": SENTENCE, "status": HTTP
  STATUS}`` when the session could not start.

While a session is open (and until the next sample after it ends) the experiment is not idle
(``idle.Sessions``). A session's processes end with it: its process group is killed when the
command exits, the client goes away, or the timeout passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shlex
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nestbed.backend.confine import user_command
from nestbed.errors import NestbedError, UserError
from nestbed.model.options import RunAs
from nestbed.results.folder import RunFolder
from nestbed.server import confinement
from nestbed.server.accounts import AccountName
from nestbed.server.auth import Caller, Invalid, server_of
from nestbed.server.experiments import ExperimentName, owned_experiment
from nestbed.store import State

log = logging.getLogger("nestbed.server")

router = APIRouter(tags=["sessions"])
PATH = "/v1/projects/{project}/experiments/{name}/nodes/{node}/session"

STDOUT, STDERR = 1, 2  # the first byte of each output message
CHUNK = 65536
START_WAIT_S = 30.0  # how long the server waits for the first message
DRAIN_S = 2.0  # after the command's exit, how long its output may still come
SHELLS = ("/bin/bash", "/bin/sh")  # the node's shell: the first there is
MAX_TIMEOUT_S = 7 * 24 * 3600.0


class Start(BaseModel):
    """The client's first message: what to run and how."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] | None = Field(default=None, min_length=1, max_length=1000)
    tty: bool = False
    cols: int = Field(default=80, ge=1, le=1000)
    rows: int = Field(default=24, ge=1, le=1000)
    term: str = Field(default="xterm-256color", pattern=r"^[A-Za-z0-9._+-]{1,64}$")
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S)

    def command(self) -> list[str]:
        """``argv``, or the node's shell (interactive with a pty, reading its input without)."""
        if self.argv is not None:
            return list(self.argv)
        shell = next((s for s in SHELLS if os.path.exists(s)), SHELLS[-1])
        return [shell, "-i"] if self.tty else [shell]

    def said(self) -> str:
        return "shell" if self.argv is None else f"exec {shlex.join(self.argv)}"


class Refused(Exception):
    """A session refused before its WebSocket is accepted (an HTTP reply)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class Target:
    """Where and as whom a session's command runs."""

    stored: str  # the experiment's stored name
    node: str
    run_as: RunAs | None  # None: as root (a trusted project)
    home: Path


def caller_of(websocket: WebSocket) -> Caller:
    """The session's user: its bearer token, else its portal session from a page of this
    server; ``Refused`` otherwise."""
    from nestbed.portal.session import COOKIE

    server = server_of(websocket)  # type: ignore[arg-type]
    given = websocket.headers.get("authorization")
    if given is not None:
        scheme, _, token = given.partition(" ")
        user = server.accounts.user_for_token(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise Refused(401, "the token is not known to this server (wrong or revoked)")
        return Caller(user=user, server=server)
    cookie = websocket.cookies.get(COOKIE)
    if not cookie:
        raise Refused(401, "a session needs a bearer token (Authorization: Bearer TOKEN) or "
                      "the portal's login")  # fmt: skip
    if not same_origin(websocket.headers.get("origin"), websocket.headers.get("host"),
                       websocket.url.scheme):  # fmt: skip
        raise Refused(403, "a terminal opens only from this server's own portal pages")
    user = server.accounts.user_for_token(cookie)
    if user is None:
        raise Refused(401, "your portal session has ended; log in again")
    return Caller(user=user, server=server)


def same_origin(origin: str | None, host: str | None, scheme: str) -> bool:
    """Whether a browser's ``Origin`` is the server it asks (scheme and host:port)."""
    if not origin or not host:
        return False
    parts = urlsplit(origin)
    wanted = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return parts.scheme == wanted and parts.netloc.lower() == host.lower()


def target(who: Caller, project: str, name: str, node: str) -> Target:
    """The session's node, after the checks of every route (``owned_experiment``); a
    ``UserError`` if the experiment is not swapped in or has no such node."""
    owned = owned_experiment(who, project, name)
    if owned.experiment.state != State.ACTIVE:
        raise UserError(
            f"experiment {name!r} is {owned.experiment.state}, not swapped in; swap it in first"
        )
    server, stored = who.server, owned.experiment.name
    with server.actives.of(server.testbed, stored) as active:
        active.node(node)
        try:
            results = active.status().get("results")
        except (NestbedError, OSError):
            results = None  # a controller gone: the session still runs in the node
    run_as = confinement.runs_as(server.accounts, server.config, project)
    home = RunFolder(Path(results)).work(node) if results else None
    return Target(stored, node, run_as, home if home is not None and home.is_dir() else Path("/"))


class Process:
    """A session's command, started in its node: its pipes, or its pty's master end."""

    def __init__(self, who: Caller, where: Target, start: Start) -> None:
        argv = start.command()
        if start.tty:
            # setsid -c makes the pty the command's controlling terminal (Ctrl-C, job
            # control, SIGHUP when the session closes), in a session and group of its own.
            argv = ["setsid", "--ctty", *argv]
        environ = dict(os.environ, TERM=start.term)
        if where.run_as is not None:
            argv, env = user_command(who.server.testbed.backend, where.run_as, argv, environ,
                                     where.home)  # fmt: skip
        else:
            env = environ | {"HOME": str(where.home)}
        self.master: int | None = None
        self.stdin: int | None = None  # the command's input, while it is open (no pty)
        popen: dict[str, Any] = {"env": env, "cwd": str(where.home)}
        if start.tty:
            self.master, slave = os.openpty()
            resize(self.master, start.cols, start.rows)
            popen |= {"stdin": slave, "stdout": slave, "stderr": slave}
        else:
            popen |= {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
                      "stderr": subprocess.PIPE, "start_new_session": True}  # fmt: skip
        try:
            with who.server.actives.of(who.server.testbed, where.stored) as active:
                self.popen = active.start(where.node, argv, **popen)
        except BaseException:
            if self.master is not None:
                os.close(self.master)
            raise
        finally:
            if self.master is not None:
                os.close(slave)
        if self.master is not None:
            os.set_blocking(self.master, False)
            self.outputs = [(self.master, STDOUT)]
        else:
            assert self.popen.stdout is not None and self.popen.stderr is not None
            assert self.popen.stdin is not None
            self.outputs = [(self.popen.stdout.fileno(), STDOUT),
                            (self.popen.stderr.fileno(), STDERR)]  # fmt: skip
            self.stdin = self.popen.stdin.fileno()
            for fd in (self.stdin, *(fd for fd, _ in self.outputs)):
                os.set_blocking(fd, False)
        self.pidfd = os.pidfd_open(self.popen.pid)

    async def write(self, data: bytes) -> None:
        """Input for the command, as fast as it reads it. Input it no longer reads (it
        closed its end, or exited) is dropped, as a pipe's reader would."""
        fd = self.master if self.master is not None else self.stdin
        view = memoryview(data)
        with contextlib.suppress(OSError):
            while view and fd is not None:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    await _ready(fd, write=True)

    async def end_input(self) -> None:
        if self.master is not None:
            await self.write(b"\x04")  # the terminal's end of file
        elif self.popen.stdin is not None:
            self.stdin = None
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def kill(self) -> None:
        """The command's whole process group (a session's processes end with it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()

    def status(self) -> int:
        code = self.popen.wait()
        return 128 - code if code < 0 else code

    def close(self) -> None:
        self.kill()
        self.popen.wait()
        for fd in (self.master, self.pidfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def resize(master: int, cols: int, rows: int) -> None:
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


async def _ready(fd: int, *, write: bool = False) -> None:
    """Until ``fd`` may be read (or written) without blocking."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    add = loop.add_writer if write else loop.add_reader
    remove = loop.remove_writer if write else loop.remove_reader
    add(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        remove(fd)


async def _forward(websocket: WebSocket, fd: int, stream: int) -> None:
    """The command's output on ``fd`` to the client until its end of file (a pty's master
    says EIO once the last process holding the terminal is gone)."""
    while True:
        await _ready(fd)
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            return
        if not data:
            return
        await websocket.send_bytes(bytes([stream]) + data)


async def _input(websocket: WebSocket, process: Process) -> None:
    """The client's input and terminal changes, until it goes away (returns then)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes"):
            await process.write(message["bytes"])
            continue
        try:
            said = json.loads(message.get("text") or "{}")
        except ValueError:
            continue  # nothing a well-behaved client sends
        if not isinstance(said, dict):
            continue
        if "resize" in said and process.master is not None:
            with contextlib.suppress(TypeError, ValueError):
                cols, rows = (max(1, min(1000, int(x))) for x in said["resize"][:2])
                resize(process.master, cols, rows)
        elif said.get("eof"):
            await process.end_input()


async def run(websocket: WebSocket, process: Process, timeout_s: float | None) -> dict[str, Any]:
    """Carries the session until the command exits, the client leaves or the timeout
    passes; what the last message says."""
    forwarding = asyncio.gather(*(_forward(websocket, fd, s) for fd, s in process.outputs))
    exited = asyncio.ensure_future(_ready(process.pidfd))
    inputs = asyncio.ensure_future(_input(websocket, process))
    try:
        done, _ = await asyncio.wait({exited, inputs}, timeout=timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        timed_out = not done
        if exited not in done:
            process.kill()
            await exited
        with contextlib.suppress(TimeoutError, OSError, WebSocketDisconnect, RuntimeError):
            await asyncio.wait_for(asyncio.shield(forwarding), DRAIN_S)
        ended: dict[str, Any] = {"exit": process.status()}
        if timed_out:
            ended["timed_out"] = True
        if inputs in done:
            ended["gone"] = True
        return ended
    finally:
        for task in (forwarding, exited, inputs):
            task.cancel()
        with contextlib.suppress(BaseException):
            await forwarding


@contextlib.contextmanager
def _counted(who: Caller, stored: str) -> Iterator[None]:
    with who.server.sessions.opened(stored):
        yield


@router.websocket(PATH)
async def session(websocket: WebSocket, project: AccountName, name: ExperimentName,
                  node: str) -> None:  # fmt: skip
    """An exec or shell session in the node (module docstring)."""
    try:
        who = await asyncio.to_thread(caller_of, websocket)
    except Refused as exc:
        await _deny(websocket, exc.status, exc.detail)
        return
    await websocket.accept()
    try:
        start = await _start_message(websocket)
        where, process = await asyncio.to_thread(_open, who, project, name, node, start)
    except NestbedError as exc:
        from nestbed.server.app import status_of

        await _end(websocket, {"error": str(exc), "status": status_of(exc)})
        return
    except WebSocketDisconnect:
        return
    began = time.monotonic()
    ended: dict[str, Any] = {}
    try:
        with _counted(who, where.stored):
            ended = await run(websocket, process, start.timeout_s)
    finally:
        await asyncio.to_thread(process.close)
        outcome = (f"node {node}: {start.said()}: exit {ended.get('exit')}"
                   f"{' (timed out)' if ended.get('timed_out') else ''}"
                   f"{' (the client left)' if ended.get('gone') else ''} after "
                   f"{time.monotonic() - began:.1f} s")  # fmt: skip
        await asyncio.to_thread(who.server.accounts.audit, who.name, "session.end", outcome,
                                project=project, experiment=name)  # fmt: skip
    if not ended.get("gone"):
        ended.pop("gone", None)
        await _end(websocket, ended)


async def _start_message(websocket: WebSocket) -> Start:
    try:
        text = await asyncio.wait_for(websocket.receive_text(), START_WAIT_S)
    except TimeoutError:
        raise Invalid(f"no start message within {START_WAIT_S:g} s") from None
    except KeyError:  # a binary first message
        raise Invalid("the first message must be JSON text naming the command") from None
    try:
        return Start.model_validate_json(text)
    except ValidationError as exc:
        said = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}"
                         for e in exc.errors())  # fmt: skip
        raise Invalid(f"the start message is not valid: {said}") from None


def _open(who: Caller, project: str, name: str, node: str, start: Start) -> tuple[Target, Process]:
    """The checks of every route, audited with the command; then the command, started."""
    with who.audited("session", project=project, experiment=name) as entry:
        where = target(who, project, name, node)
        entry.outcome = f"ok: node {node}: {start.said()}"
        return where, Process(who, where, start)


async def _deny(websocket: WebSocket, status: int, detail: str) -> None:
    """An HTTP reply instead of the WebSocket (a close with the reason where the server
    cannot send one)."""
    try:
        await websocket.send_denial_response(JSONResponse({"detail": detail}, status_code=status))
    except RuntimeError:
        await websocket.close(code=1008, reason=detail[:120])


async def _end(websocket: WebSocket, last: dict[str, Any]) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await websocket.send_text(json.dumps(last))
        await websocket.close()
