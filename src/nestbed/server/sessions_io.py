"""A session's command and its I/O (``server.sessions`` is the route): what to run
(``Start``, the client's first message), where and as whom (``Target``), the command
started confined in its node (``Process``), and the session carried between the command
and its WebSocket in the server's event loop (``run``): output as it comes, input as fast as
the command reads it, the exit seen through a pidfd, so a session holds no worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field

from nestbed.backend.confine import user_command
from nestbed.backend.processes import exit_fd, kill_group
from nestbed.backend.terminals import resize
from nestbed.model.options import RunAs
from nestbed.server.auth import Caller

STDOUT, STDERR = 1, 2  # the first byte of each output message
CHUNK = 65536
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


@dataclass
class Target:
    """Where and as whom a session's command runs."""

    stored: str  # the experiment's stored name
    node: str
    run_as: RunAs | None  # None: as root (a trusted project)
    home: Path


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
        self.pidfd = exit_fd(self.popen)  # a pidfd, or a proxy's (a node on another host)

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
        kill_group(self.popen)
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
            # Not on the loop: a command on another host is killed through its agent.
            await asyncio.to_thread(process.kill)
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
