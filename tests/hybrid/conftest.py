"""Fixtures of the hybrid tests: runs of experiment files through the life cycle, in a store
of the test's own, swapped out however the test ends."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nestbed.spec import load


@dataclass(frozen=True)
class Ran:
    """A finished run: its experiment, summary and results folder."""

    exp: Any
    summary: dict[str, Any]
    results: Path

    def table(self, relative: str) -> list[dict[str, str]]:
        with (self.results / relative).open() as f:
            return list(csv.DictReader(f))

    @property
    def flows(self) -> dict[str, dict[str, str]]:
        """traffic/flows.csv, a row per flow by name."""
        return {row["flow"]: row for row in self.table("traffic/flows.csv")}


@pytest.fixture
def simulator() -> str:
    """nestbed-sim, for tests that build namespaces around it; skips without root or it."""
    from nestbed.binaries import built_binary
    from nestbed.errors import EnvironmentProblem

    if os.geteuid() != 0:
        pytest.skip("builds network namespaces (root)")
    try:
        built_binary("nestbed-probe")
        return built_binary("nestbed-sim")
    except EnvironmentProblem:
        pytest.skip("nestbed-sim is not built (the hybrid extra): run `make setup`")


@pytest.fixture
def testbed(tmp_path):
    """The life cycle of a store of the test's own on this machine; its experiments are
    swapped out at the end however the test ended."""
    from nestbed.backend.linux import LinuxBackend
    from nestbed.lifecycle import Testbed
    from nestbed.store import State, Store

    store = Store.open(str(tmp_path / "store.db"))
    bed = Testbed(store, LinuxBackend())
    yield bed
    for record in store.list():
        if record.state not in (State.DEFINED, State.SWAPPED):
            bed.swap_out(record.name)
    store.close()


@pytest.fixture
def run_file(testbed, tmp_path):
    """Defines the ns file TEXT as NAME-PID and runs it to its `$ns halt` (``run_file(NAME,
    TEXT)``): a ``Ran``."""
    from nestbed.lifecycle.runs import run
    from nestbed.model.options import RunOptions

    def go(name: str, text: str) -> Ran:
        path = tmp_path / f"{name}{os.getpid()}.ns"
        path.write_text(text)
        loaded = load(path)
        exp = loaded.experiment
        testbed.store.create_experiment(
            exp.name, source_text=loaded.text, source_format="ns", source_file=str(path),
            ir_json=exp.to_json(),
        )  # fmt: skip
        results = tmp_path / f"results-{name}"
        summary = run(testbed, exp.name, RunOptions(results=results, report=False))
        assert summary["outcome"] == "halted", summary
        return Ran(exp, summary, results)

    return go
