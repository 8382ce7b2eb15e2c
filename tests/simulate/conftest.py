"""Fixtures of the simulation tests: ns-2 present (or a skip), and simulated runs of files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import PRELUDE, Simulate

from nestbed.simulate import simulate


@pytest.fixture
def ns() -> None:
    """ns-2 is installed; skipped without it, but a failure in CI (where setup installs it)."""
    if shutil.which("ns"):
        return
    if os.environ.get("CI"):
        pytest.fail("ns-2 (`ns`) is not installed but CI is set; `make setup` installs it")
    pytest.skip("ns-2 (`ns`) is not installed")


@pytest.fixture
def sim(ns: None, tmp_path: Path) -> Simulate:
    """Simulates BODY (after a prelude making $ns; `$ns run` appended) or an existing file;
    returns the summary and the results folder."""
    count = iter(range(1000))

    def _sim(body: str | Path, **kwargs: Any) -> tuple[dict[str, Any], Path]:
        n = next(count)
        if isinstance(body, Path):
            path = body
        else:
            path = tmp_path / f"exp{n}.ns"
            path.write_text(PRELUDE + body.strip("\n") + "\n$ns run\n")
        results = tmp_path / f"run{n}"
        return simulate(path, results, **kwargs), results

    return _sim
