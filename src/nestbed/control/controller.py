"""The controller process of one active experiment (``python -m nestbed.control --start
FILE``): carries out the current run and answers requests on the experiment's control
socket. A sweep's link-reuse mode starts the next run in the same process (`next_run`): a few
milliseconds instead of a new process's second.

It reaches the machine only through its back end (named in the start document); a file
descriptor it was started with (the life cycle's lock) stays open as long as it lives.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from nestbed.backend import get, preload
from nestbed.backend.base import Backend
from nestbed.backend.plan import experiment_tag
from nestbed.control import requests
from nestbed.control.client import PID, SOCKET
from nestbed.control.run import Run
from nestbed.control.server import RequestServer
from nestbed.errors import Refused
from nestbed.model import Experiment
from nestbed.model.options import ControllerStart

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Controller:
    """The current run, and the requests that reach it."""

    def __init__(self, backend: Backend, start: ControllerStart):
        self.backend = backend
        self.run = Run(backend, start)
        self.directory = backend.run_dir(self.run.plan)

    def handle(self, line: str) -> dict[str, Any]:
        """The reply to one request line (the server adds ``ok``)."""
        request = requests.parse(line)
        run = self.run
        match request:
            case requests.Ping():
                return {"t0_monotonic": run.scheduler.t0}
            case requests.Status():
                return run.status(links=request.links, top=request.top)
            case requests.Event():
                return run.event(request)
            case requests.Finish():
                return run.finish(request.outcome, request.reason)
            case requests.NextRun():
                return self.next_run(request.start)
            case requests.Shutdown():
                return {"shutdown": True}
        raise AssertionError(f"request {request!r} has no handler")

    def next_run(self, start: ControllerStart) -> dict[str, Any]:
        """Begins the next run on the same network, with the options of ``start``."""
        previous = self.run
        if not previous.finished.is_set():
            raise Refused("the current run has not finished; finish it first")
        if start.backend != self.backend.name:
            raise Refused(
                f"next_run on back end {start.backend} in a controller of {self.backend.name}"
            )
        exp = Experiment.from_json(start.ir.read_text())
        if experiment_tag(exp.name) != previous.plan.tag:
            raise Refused(f"next_run of another experiment ({exp.name}) in {previous.exp.name}")
        # What the last run's events changed is undone before the next run begins.
        for line in previous.links.reset(exp):
            print(f"before the next run, {line}", file=sys.stderr, flush=True)  # the log
        following = Run(self.backend, start)
        previous.retire()
        following.start()
        self.run = following
        return {"run_id": following.run_id, "results": str(following.folder.root)}

    def interrupted(self, signum: int) -> None:
        # The outcome names the signal, as a command's own interrupt does.
        name = signal.Signals(signum).name
        self.run.finish(f"interrupted ({name})", f"the controller got {name}")

    def serve(self) -> None:
        """Answers on the experiment's control socket until a `shutdown` request; the pid
        file exists before the socket does."""
        (self.directory / PID).write_text(f"{os.getpid()}\n")
        RequestServer(self.directory / SOCKET, self.handle).serve()


def _told_to_go(parent: int) -> bool:
    """Whether the swap-in that started this process early says "go" on stdin. Its end of
    the pipe closing says no; so does its death, watched apart from the pipe, since a process
    that inherited the pipe's end would otherwise keep this one waiting forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # whatever the starter ignored
    while os.getppid() == parent:
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if ready:
            return bool(sys.stdin.readline())
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestbed.control")
    parser.add_argument("--start", type=Path, required=True, help="a ControllerStart (JSON)")
    parser.add_argument(
        "--wait", type=int, metavar="PARENT",
        help="started early by process PARENT: read a line on stdin first",
    )  # fmt: skip
    parser.add_argument("--preload", metavar="BACKEND", help="the back end to load early")
    args = parser.parse_args(argv)
    if args.wait is not None:
        preload(args.preload)  # the back end's modules too, while the network is built
        if not _told_to_go(args.wait):
            return 0  # the swap-in that started this process early failed: nothing to do
    start = ControllerStart.model_validate_json(args.start.read_text())
    controller = Controller(get(start.backend), start)

    def on_signal(signum: int, _frame: Any) -> None:
        threading.Thread(target=controller.interrupted, args=(signum,)).start()

    for signum in _SIGNALS:
        signal.signal(signum, on_signal)
    controller.run.start()
    controller.serve()
    return 0
