"""linktest on an experiment whose own events and traffic run during the test (the README's
sequence: swap in the dumbbell, then linktest at level 4 at once): what the experiment does
to its links is reported as not tested with the reason, never as a failure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from machine import DEADLINE_S, left, nestbed

from nbtest import EXAMPLES

pytestmark = pytest.mark.root


def test_linktest_right_after_swapping_in_the_dumbbell_is_not_fooled_by_it(tmp_path: Path):
    name = f"s17dumbbell{os.getpid()}"
    source = tmp_path / f"{name}.ns"
    source.write_text((EXAMPLES / "dumbbell.ns").read_text())
    db = tmp_path / "store.db"
    swapin = nestbed(db, "swapin", str(source), "--results", str(tmp_path / "results"))
    _, stderr = swapin.communicate(timeout=DEADLINE_S)
    assert swapin.returncode == 0, stderr
    try:
        check = nestbed(db, "linktest", name, "--level", "4", "--json")
        stdout, stderr = check.communicate(timeout=DEADLINE_S * 3)
        report = json.loads(stdout)
        assert check.returncode == 0, stderr + json.dumps(report["checks"], indent=1)
        assert report["counts"]["fail"] == 0
        skipped = {(c["level"], c["link"]): c["reason"] for c in report["checks"]
                   if c["verdict"] == "skip"}  # fmt: skip
        # Level 1 began within a second or so of the swap-in: the CBR (1 s to 14 s) shared
        # access1 during it, and every skip says why.
        assert "traffic (cbr0)" in skipped[(1, "access1")]
        assert all(reason.startswith("not tested: ") for reason in skipped.values())
        assert report["counts"]["pass"] > 0  # what the experiment left alone was tested
    finally:
        out = nestbed(db, "swapout", name)
        out.communicate(timeout=DEADLINE_S)
    assert left(name) == []
