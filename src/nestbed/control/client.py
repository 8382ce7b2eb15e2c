"""Starting an experiment's controller and talking to it over its control socket.

The controller's files live in the back end's run folder of the experiment: the start
document it was launched with, its socket, log and pid file.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nestbed.backend.base import Backend
from nestbed.backend.plan import Plan
from nestbed.backend.sockets import SocketClient, spawn_daemon, wait_daemon
from nestbed.errors import NestbedError, UserError

if TYPE_CHECKING:
    from nestbed.model.options import ControllerStart

SOCKET = "control.sock"
START = "controller.json"  # the ControllerStart it was launched with
LOG = "controller.log"
PID = "controller.pid"  # written by the controller before its socket exists
START_TIMEOUT_S = 30
ALIVE_TIMEOUT_S = 5


class ControllerClient:
    """The controller of one swapped-in experiment: launch it, then send it requests over
    one connection, kept open across requests and opened again if it broke."""

    def __init__(self, backend: Backend, plan: Plan):
        self.backend, self.plan = backend, plan
        self.directory = backend.run_dir(plan)
        self.path = self.directory / SOCKET
        self.what = f"the controller of experiment {plan.experiment}"
        self.lock = threading.Lock()  # one request at a time on the connection
        self.client: SocketClient | None = None
        self.early: subprocess.Popen | None = None  # started, waiting for its document

    def prestart(self, *, pass_fds: Sequence[int] = ()) -> None:
        """Starts the controller's process now, before the network exists: it loads its
        modules (half a second) while the back end builds, then waits on its stdin for
        ``launch``; ``pass_fds`` stay open in it for its whole life (a lock)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        argv = [*self._argv(), "--wait", str(os.getpid()), "--preload", self.backend.name]
        self.early = spawn_daemon(argv, self.path, self.directory / LOG, pass_fds=pass_fds,
                                  stdin=subprocess.PIPE)  # fmt: skip
        # Named at once, not when it serves: a swap-in killed now leaves a process that
        # swap-out and cleanup must find (it is still loading its modules).
        (self.directory / PID).write_text(f"{self.early.pid}\n")

    def launch(self, start: ControllerStart, *, pass_fds: Sequence[int] = ()) -> None:
        """Starts the controller with ``start`` (written to the run folder), or tells the one
        ``prestart`` started to go, and waits until it answers; ``pass_fds`` stay open in the
        controller for its whole life (a lock)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.directory / START).write_text(start.model_dump_json(indent=2) + "\n")
        process, self.early = self.early, None
        if process is None:
            process = spawn_daemon(self._argv(), self.path, self.directory / LOG,
                                   pass_fds=pass_fds)  # fmt: skip
        else:
            assert process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # it exited: wait_daemon says why
                process.stdin.write(b"go\n")
                process.stdin.close()
        wait_daemon(process, self.path, self.directory / LOG, self.what,
                    timeout_s=START_TIMEOUT_S, ping=True)  # fmt: skip

    def abandon(self) -> None:
        """Ends a controller ``prestart`` started that was never launched (a failed
        swap-in): its stdin closes, and it exits without doing anything."""
        process, self.early = self.early, None
        if process is not None:
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            try:
                process.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _argv(self) -> list[str]:
        return [sys.executable, "-m", "nestbed.control", "--start", str(self.directory / START)]

    def request(self, op: str, timeout: float | None = 60, **fields: Any) -> dict[str, Any]:
        """One request and its reply; a refusal is a UserError, a controller that is not
        running one sentence saying what to do."""
        with self.lock:
            client = self._connection()
            client.sock.settimeout(timeout)
            try:
                return client.request(op, **fields)
            except UserError:
                raise  # refused: the connection is fine
            except BaseException:
                # A timeout leaves a reply to come on this connection; anything else may
                # have broken it: the next request starts afresh.
                self._drop()
                raise

    def next_run(self, start: ControllerStart, timeout: float | None = 60) -> dict[str, Any]:
        """Begins the next run on the same network with ``start`` (its options included),
        once the current run has finished; the reply names its run and results folder."""
        return self.request("next_run", timeout, start=start.model_dump(mode="json"))

    def alive(self) -> bool:
        """Whether the controller answers a ping now."""
        try:
            self.request("ping", timeout=ALIVE_TIMEOUT_S)
        except (NestbedError, OSError, ValueError):
            return False
        return True

    def close(self) -> None:
        with self.lock:
            self._drop()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _connection(self) -> SocketClient:
        if self.client is not None and _closed_by_peer(self.client.sock):
            self._drop()
        if self.client is None:
            try:
                self.client = SocketClient(self.path, "the controller")
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise UserError(
                    f"the controller of experiment {self.plan.experiment} is not running; swap "
                    f"the experiment out and in again (`nestbed swapout {self.plan.experiment}`)"
                ) from exc
        return self.client

    def _drop(self) -> None:
        if self.client is not None:
            with contextlib.suppress(OSError):
                self.client.close()
            self.client = None


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle connection is no longer usable: readable between requests means the
    controller closed it (it exited) or sent what nobody asked for."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
