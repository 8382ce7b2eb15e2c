"""Points of a sweep run side by side that find what they need held (a cluster's node slots,
``Held``): they wait for the sweep's own points to end rather than fail, and fail, saying why,
only when other experiments hold it (no root: the runs are stood in for)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nbtest import EXAMPLES
from nestbed.errors import Held
from nestbed.lifecycle import runs
from nestbed.sweep import execute
from nestbed.sweep.spec import from_flags

HELD = "experiment {} does not fit in the slots other experiments leave on the cluster"


class Slots:
    """Stands in for the runs on a cluster of SLOTS node slots, one per run: a run that finds
    none free raises Held. A run that got one keeps it until some run has been refused (or
    10 s), so that points side by side really meet a full cluster."""

    def __init__(self, slots: int):
        self.slots, self.held, self.most = slots, 0, 0
        self.lock = threading.Lock()
        self.refused = threading.Event()
        self.attempts: list[str] = []

    def run_alone(self, store_path, exp, options):  # as runs.run_alone
        with self.lock:
            self.attempts.append(exp.name)
            if self.held == self.slots:
                self.refused.set()
                raise Held(HELD.format(exp.name))
            self.held += 1
            self.most = max(self.most, self.held)
        self.refused.wait(timeout=10)
        with self.lock:
            self.held -= 1
        return {"outcome": "completed"}


@pytest.fixture
def sweep():
    return from_flags(EXAMPLES / "armada.ns", ["bw=10Mb,20Mb,30Mb,40Mb"], [])


def test_a_point_that_finds_the_slots_held_by_the_sweep_waits_for_them(
    sweep, tmp_path: Path, monkeypatch
):
    slots = Slots(2)
    monkeypatch.setattr(runs, "run_alone", slots.run_alone)
    rows = execute.run_sweep(sweep, tmp_path, parallel=3)
    assert sorted(r["outcome"] for r in rows) == ["completed"] * 4, rows
    assert slots.refused.is_set() and slots.most == 2
    # The refused point ran later. (Put back with a new point beside it, either may be
    # refused again, so how many attempts there were is the machine's pace.)
    assert len(slots.attempts) > 4 and len(set(slots.attempts)) == 4, slots.attempts
    assert len(execute.read_rows(tmp_path)) == 4  # a refused attempt is not recorded


def test_a_point_fails_saying_so_when_other_experiments_hold_the_slots(
    sweep, tmp_path: Path, monkeypatch
):
    slots = Slots(0)
    monkeypatch.setattr(runs, "run_alone", slots.run_alone)
    rows = execute.run_sweep(sweep, tmp_path, parallel=2)
    assert [r["outcome"] for r in rows] == ["failed"] * 4
    assert all("does not fit in the slots other experiments leave" in r["reason"] for r in rows)
    # Each tried once: a point that waited for another, refused as well, holds nothing.
    assert sorted(slots.attempts) == sorted(set(slots.attempts)) and len(slots.attempts) == 4
