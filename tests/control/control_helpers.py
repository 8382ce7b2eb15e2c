"""Helpers of the controller tests: experiments on the fake back end, whose controllers are
real processes and whose "nodes" are local processes (no root needed)."""

from __future__ import annotations

import csv
import itertools
import os
import time
from pathlib import Path

import pytest

from nestbed.backend.fake import FakeBackend
from nestbed.backend.plan import Plan, plan
from nestbed.control.client import ControllerClient
from nestbed.model import Experiment
from nestbed.model.options import ControllerStart, RunOptions
from nestbed.spec import load

_names = itertools.count()


class FakeExperiment:
    """One experiment swapped in on a fake machine of the test's own."""

    def __init__(self, tmp: Path, text: str):
        self.tmp = tmp
        source = tmp / f"i19c-{os.getpid()}-{next(_names)}.yaml"
        source.write_text(text)
        self.exp: Experiment = load(source, name=source.stem).experiment
        self.plan: Plan = plan(self.exp)
        self.backend = FakeBackend(tmp / "fake")
        self.backend.swap_in(self.plan)
        self.run_dir = self.backend.run_dir(self.plan)
        self.ir = self.run_dir / "ir.json"
        self.ir.write_text(self.exp.to_json())
        self.client = ControllerClient(self.backend, self.plan)
        self.runs = itertools.count(1)

    def start(self, results: Path | None = None, **options: object) -> ControllerStart:
        """A start document for the next run (report off unless asked: it takes seconds)."""
        return ControllerStart(
            backend="fake",
            ir=self.ir,
            results=results or self.tmp / f"run{next(self.runs)}",
            options=RunOptions(**{"report": False, **options}),
        )

    def launch(self, **options: object) -> ControllerStart:
        start = self.start(**options)
        self.client.launch(start)
        return start

    def log(self) -> str:
        path = self.run_dir / "controller.log"
        return path.read_text() if path.exists() else ""

    def close(self) -> None:
        if self.client.alive():
            self.client.request("finish", timeout=120)
            self.client.request("shutdown", timeout=10)
        self.client.close()
        self.backend.swap_out(self.plan)


TWO_NODES = """
nodes:
  - {name: a}
  - {name: b}
links:
  - {name: l0, members: [a, b], bandwidth: 10Mb, delay: 5ms}
"""

PROGRAM = (
    TWO_NODES
    + """
programs:
  - {name: hello, node: a, command: echo hello from $NESTBED_NODE}
events:
  - {at: 0.2, object: hello, verb: start}
  - {at: 0.3, object: l0, verb: down}
  - {at: 600, object: ns, verb: halt}
"""
)


def wait_for(check, what: str, timeout_s: float = 30):
    """Polls ``check`` until it returns something true; fails naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"{what} did not happen within {timeout_s} s")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))
