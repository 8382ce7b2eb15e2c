"""Starting an experiment's controller and talking to it over its socket."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nestbed.backend import linux
from nestbed.backend.plan import Plan
from nestbed.errors import EnvironmentProblem, InternalError, UserError

SOCKET = "control.sock"
_START_TIMEOUT_S = 30


def socket_path(plan: Plan) -> Path:
    return linux.run_dir(plan) / SOCKET


def launch(
    plan: Plan,
    ir: Path,
    results: Path,
    run_id: int | None,
    capture: bool,
    *,
    report: bool = True,
    cpumon: tuple[str, ...] = (),
    cpumon_duty: float | None = None,
    capture_nodes: tuple[str, ...] = (),
) -> None:
    """Starts the controller of a swapped-in experiment and waits until it answers.

    Without ``report`` the run's tables are written but not report.md and its plots (a
    sweep's runs: a second or two each). ``cpumon`` names the nodes where nestbed-cpumon runs
    (looping ``cpumon_duty`` of each second); ``capture_nodes`` the only nodes whose link
    ends are captured (all when empty)."""
    directory = linux.run_dir(plan)
    argv = [sys.executable, "-m", "nestbed.control", "--ir", str(ir), "--results", str(results)]
    if run_id is not None:
        argv += ["--run-id", str(run_id)]
    if capture:
        argv.append("--capture")
    if not report:
        argv.append("--no-report")
    for node in cpumon:
        argv += ["--cpumon", node]
    for node in capture_nodes:
        argv += ["--capture-node", node]
    if cpumon_duty is not None:
        argv += ["--cpumon-duty", str(cpumon_duty)]
    with (directory / "controller.log").open("ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    path = socket_path(plan)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            tail = (directory / "controller.log").read_text(errors="replace").strip()
            last = tail.splitlines()[-1] if tail else "no output"
            raise EnvironmentProblem(
                f"the controller of experiment {plan.experiment} exited at start: {last}"
            )
        if path.exists():
            with contextlib.suppress(OSError):
                client = linux.SocketClient(path, "the controller", timeout=5)
                try:
                    client.request("ping")
                    return
                finally:
                    client.close()
        if time.monotonic() > deadline:
            process.kill()
            raise InternalError(f"the controller did not start; see {directory}/controller.log")
        time.sleep(0.02)


def request(plan: Plan, op: str, timeout: float | None = 60, **fields: Any) -> dict[str, Any]:
    """One request to the experiment's controller."""
    try:
        client = linux.SocketClient(socket_path(plan), "the controller", timeout=timeout)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise UserError(
            f"the controller of experiment {plan.experiment} is not running; swap the "
            f"experiment out and in again (`nestbed swapout {plan.experiment}`)"
        ) from exc
    try:
        return client.request(op, **fields)
    finally:
        client.close()
