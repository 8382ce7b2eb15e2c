"""Starting an experiment's controller and talking to it over its socket."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nestbed.backend.base import Backend
from nestbed.backend.plan import Plan
from nestbed.backend.sockets import SocketClient, answers, start_daemon
from nestbed.errors import UserError
from nestbed.model.options import ControllerStart

SOCKET = "control.sock"
_START_TIMEOUT_S = 30


class ControllerClient:
    """The controller of one swapped-in experiment."""

    def __init__(self, backend: Backend, plan: Plan):
        self.backend, self.plan = backend, plan
        self.directory = backend.run_dir(plan)
        self.socket = self.directory / SOCKET
        self._client: SocketClient | None = None

    def launch(self, start: ControllerStart, *, pass_fds: Sequence[int] = ()) -> None:
        import sys

        options = start.options
        argv = [sys.executable, "-m", "nestbed.control", "--ir", str(start.ir),
                "--results", str(start.results)]  # fmt: skip
        if start.run_id is not None:
            argv += ["--run-id", str(start.run_id)]
        if options.capture:
            argv.append("--capture")
        if not options.report:
            argv.append("--no-report")
        for node in options.cpumon:
            argv += ["--cpumon", node]
        for node in options.capture_nodes:
            argv += ["--capture-node", node]
        argv += ["--cpumon-duty", str(options.cpumon_duty)]
        start_daemon(argv, self.socket, self.directory / "controller.log",
                     f"the controller of experiment {self.plan.experiment}",
                     timeout_s=_START_TIMEOUT_S, ping=True, pass_fds=pass_fds)  # fmt: skip

    def request(self, op: str, timeout: float | None = 60, **fields: Any) -> dict[str, Any]:
        try:
            client = SocketClient(self.socket, "the controller", timeout=timeout)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise UserError(
                f"the controller of experiment {self.plan.experiment} is not running; swap the "
                f"experiment out and in again (`nestbed swapout {self.plan.experiment}`)"
            ) from exc
        with client:
            return client.request(op, **fields)

    def alive(self) -> bool:
        return answers(self.socket, "the controller")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def socket_path(directory: Path) -> Path:
    return directory / SOCKET
