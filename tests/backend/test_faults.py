"""Faults during a run, on real namespaces: the link emulator killed, the results folder's
file system full. The run ends as failed, keeps what it measured, says why in one sentence,
and leaves nothing on the machine."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from machine import DEADLINE_S, left, manifest, nestbed, processes, state, until
from test_signals import experiment_file, measuring

from nestbed.backend.linux import RUN_DIR

pytestmark = pytest.mark.root


def test_a_run_whose_link_emulator_is_killed_ends_failed_and_keeps_its_measures(tmp_path):
    name = "s17linkd"
    db, results = tmp_path / "store.db", tmp_path / "results"
    process = nestbed(db, "run", str(experiment_file(tmp_path, name)), "--results", str(results))
    try:
        until(lambda: state(db, name) == "active" and measuring(results), "the run to measure")
        linkd = int((RUN_DIR / name / "linkd.pid").read_text())
        rows = len((results / "links" / "counters.csv").read_text().splitlines())
        os.kill(linkd, signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stderr
    ended = manifest(results)
    assert ended["outcome"] == "failed"
    assert "nestbed-linkd of experiment s17linkd exited during the run" in ended["reason"]
    assert "nestbed-linkd of experiment s17linkd exited" in stdout
    # What was measured before stays: the counters rows then, the flow tables, the report.
    assert len((results / "links" / "counters.csv").read_text().splitlines()) >= rows
    assert (results / "report.md").exists()
    assert state(db, name) == "swapped"
    assert left(name) == []
    assert processes(str(RUN_DIR / name)) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs of the test's own, unmounted at the end."""
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "s17tmpfs", str(where)],
                   check=True)  # fmt: skip
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_run_whose_results_disk_fills_says_so_and_leaves_nothing(tmp_path, small_disk):
    name = "s17full"
    db, results = tmp_path / "store.db", small_disk / "results"
    # Packet captures of a 1 Mb/s CBR fill 256 KiB in about a second.
    process = nestbed(db, "run", str(experiment_file(tmp_path, name)), "--results", str(results),
                      "--capture")  # fmt: skip
    stdout, stderr = process.communicate(timeout=DEADLINE_S)
    said = (stdout + stderr).replace("\n", " ")
    assert process.returncode in (1, 3), said
    assert "is full" in said, said
    # Nothing there passes for a complete run: the manifest is not ended, or ended as failed.
    assert manifest(results).get("outcome") in (None, "running", "failed")
    assert state(db, name) == "swapped"
    assert left(name) == []
