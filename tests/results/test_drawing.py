"""The report drawn after the run, in a process of its own (the manifest says so and how it
went), or again on demand; a failed drawing keeps its traceback and the results."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

import pytest

from nestbed.results import drawing

EVENTS = "index,source,planned_s,actual_s,error_ms,object,verb,args,outcome,message"


@pytest.fixture(autouse=True)
def own_drawer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's own drawer (its socket and lock in a state folder of the test's): the
    machine's drawer may be busy with another test's runs, and what happens to those is
    not this test's."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("NESTBED_RUN_DIR", str(state))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run-1"
    folder.mkdir()
    manifest = {"experiment": "line", "run_id": 1, "outcome": "completed", "reason": None,
                "duration_s": 2.0, "files": ["events.csv"]}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "events.csv").write_text(f"{EVENTS}\n0,static,1.0,1.001,1,link0,down,,ok,\n")
    return folder


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _until_drawn(folder: Path, deadline_s: float = 120) -> None:
    """Waits until the manifest no longer says "drawing" (a drawer took the folder and
    its lock may not exist yet, so wait_drawn alone could return too early)."""
    end = time.monotonic() + deadline_s
    while _manifest(folder)["report"]["state"] == "drawing":
        assert time.monotonic() < end, f"{folder} still drawing"
        time.sleep(0.05)


def _runs(tmp_path: Path, n: int) -> list[Path]:
    folders = []
    for i in range(n):
        folder = tmp_path / f"many-{i}"
        folder.mkdir()
        manifest = {"experiment": "line", "run_id": i, "outcome": "completed", "reason": None,
                    "duration_s": 2.0, "files": ["events.csv"]}  # fmt: skip
        (folder / "manifest.json").write_text(json.dumps(manifest))
        (folder / "events.csv").write_text(f"{EVENTS}\n0,static,1.0,1.001,1,link0,down,,ok,\n")
        folders.append(folder)
    return folders


def test_runs_ending_faster_than_reports_are_drawn_queue_with_one_drawer(tmp_path):
    # Before, every run's end started a process of its own that waited its turn: a tight
    # loop of runs piled up hundreds of them, 20-32 MB each.
    folders = _runs(tmp_path, 30)
    started = [p for p in map(drawing.draw_detached, folders) if p is not None]
    # One drawer; a second only when one was closing down as the loop began.
    assert len(started) <= 2, len(started)
    for folder in folders:
        drawing.wait_drawn(folder)
        _until_drawn(folder)
        assert _manifest(folder)["report"] == {"state": "written", "drawn_by": drawing.DETACHED}
        assert "## Events" in (folder / "report.md").read_text()
        assert not (folder / drawing.LOCK).exists()
    for process in started:
        assert process.wait() == 0


def test_a_folder_removed_while_queued_costs_the_drawer_none_of_the_others(tmp_path, monkeypatch):
    gone, *others = _runs(tmp_path, 4)
    held = os.open(gone / drawing.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # an earlier drawing of it: the drawer waits for it
    try:
        first = drawing.draw_detached(gone)
        assert first is not None
        assert [drawing.draw_detached(folder) for folder in others] == [None] * 3  # queued
    finally:
        import shutil

        shutil.rmtree(gone)  # its run's folder removed while the drawer waited on it
        os.close(held)
    for folder in others:
        _until_drawn(folder)
        assert _manifest(folder)["report"] == {"state": "written", "drawn_by": drawing.DETACHED}
    assert first.wait() == 1  # it says one folder failed


def test_the_drawer_draws_at_the_lowest_priority_and_takes_folders_at_its_starters(run):
    # Before, the whole drawer ran at SCHED_IDLE: on a busy machine its socket was answered
    # after the sender's timeout, and a run's swap-out waited minutes.
    held = os.open(run / drawing.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # the drawer waits on it, drawing nothing meanwhile
    try:
        drawer = drawing.draw_detached(run)
        assert drawer is not None
        policies: dict[int, int] = {}
        end = time.monotonic() + 120
        while time.monotonic() < end:
            policies = {}
            for task in os.listdir(f"/proc/{drawer.pid}/task"):
                with contextlib.suppress(OSError):
                    policies[int(task)] = os.sched_getscheduler(int(task))
            if policies.get(drawer.pid) == os.SCHED_IDLE and len(policies) > 1:
                break
            time.sleep(0.05)
        assert policies.get(drawer.pid) == os.SCHED_IDLE, policies  # the drawing
        others = [p for tid, p in policies.items() if tid != drawer.pid]
        assert os.SCHED_OTHER in others, policies  # the thread that takes folders
    finally:
        os.close(held)
    assert drawer.wait() == 0


def test_a_detached_drawing_writes_the_report_and_the_manifest_says_so(run):
    drawing.draw_detached(run)
    assert _manifest(run)["report"]["state"] in ("drawing", "written")
    said = drawing.wait_drawn(run)
    assert said == {"state": "written", "drawn_by": drawing.DETACHED}
    assert "## Events" in (run / "report.md").read_text()
    files = _manifest(run)["files"]
    assert "report.md" in files and "events.csv" in files
    assert not (run / drawing.LOCK).exists() and not (run / drawing.ERROR).exists()


def test_drawing_on_demand_draws_it_again(run):
    drawing.draw_detached(run)
    drawing.wait_drawn(run)
    (run / "report.md").unlink()
    assert drawing.draw(run) == run / "report.md"
    assert (run / "report.md").is_file()
    assert _manifest(run)["report"] == {"state": "written", "drawn_by": drawing.ON_DEMAND}


def test_a_failed_drawing_keeps_its_traceback_and_the_results(run, monkeypatch):
    def broken(_folder: Path) -> Path:
        raise ValueError("a table the report cannot read")

    monkeypatch.setattr("nestbed.results.report.write_report", broken)
    assert drawing.draw(run) is None
    report = _manifest(run)["report"]
    assert report["state"] == "failed" and "cannot read" in report["error"]
    assert "ValueError" in (run / drawing.ERROR).read_text()
    assert (run / "events.csv").is_file()


def test_a_run_without_a_report_says_so(run):
    drawing.note_off(run)
    assert _manifest(run)["report"]["state"] == "off"
    assert drawing.wait_drawn(run)["state"] == "off"  # nobody drawing: no wait


def test_a_drawing_of_a_folder_still_being_drawn_does_not_wait_for_it(run):
    # An earlier drawing of the same folder (a results folder used again) holds the lock:
    # the run's end starts the next drawing without waiting (before, it blocked here).
    earlier = os.open(run / drawing.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(earlier, fcntl.LOCK_EX)
    try:
        drawing.draw_detached(run)
        assert _manifest(run)["report"]["state"] == "drawing"
    finally:
        (run / drawing.LOCK).unlink()  # as a drawing lets go
        os.close(earlier)
    _until_drawn(run)
    assert _manifest(run)["report"] == {"state": "written", "drawn_by": drawing.DETACHED}
    assert "## Events" in (run / "report.md").read_text()
