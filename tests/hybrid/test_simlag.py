"""A run's record of the simulated part: its lag table, and what the manifest is told when the
simulator fell behind or died."""

from __future__ import annotations

import csv
import subprocess

from nbtest import build
from nestbed.backend import sim
from nestbed.backend.plan import plan
from nestbed.control.simlag import SimulationLag
from nestbed.results.folder import RunFolder

HYBRID = """
nodes: [{name: h1}, {name: r1, simulated: true}]
links: [{name: a1, members: [h1, r1], simulated: true}]
"""


def _run_dir(tmp_path, pid: int):  # type: ignore[no-untyped-def]
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / sim.PID).write_text(f"{pid}\n")
    (directory / sim.LOG).write_text("ready\nlag 0 0.001000 0.001000 0\n")
    return directory


def test_a_run_keeps_the_lag_of_its_own_seconds_and_marks_a_late_simulator(tmp_path):
    with subprocess.Popen(["sleep", "30"]) as alive:
        directory = _run_dir(tmp_path, alive.pid)
        # The run starts here.
        record = SimulationLag(plan(build(HYBRID)), sim.LocalSimulator(directory))
        with (directory / sim.LOG).open("a") as log:
            log.write("lag 1 0.002000 0.002000 0\nlag 2 0.009000 0.009000 4\n")
        folder = RunFolder(tmp_path / "results")
        problems = record.record(folder)
        alive.kill()
    with folder.simulation_lag.open() as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"t_s": "1", "lag_max_s": "0.002"}, {"t_s": "2", "lag_max_s": "0.009"}]
    assert problems == [
        "the simulated part fell behind real time by up to 9.0 ms, more than the 5 ms "
        "allowed, in 1 of 2 seconds (see simulation/lag.csv)"
    ]


def test_a_simulator_that_died_during_the_run_is_said(tmp_path):
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)
    directory = _run_dir(tmp_path, int(gone.stdout))
    record = SimulationLag(plan(build(HYBRID)), sim.LocalSimulator(directory))
    with (directory / sim.LOG).open("a") as log:
        log.write('lag 1 0.001000 0.001000 0\nmsg="FdNetDevice read error"\n')
    problems = record.record(RunFolder(tmp_path / "results"))
    assert problems == [
        'nestbed-sim, the simulated part, ended during the run: msg="FdNetDevice read error" '
        "(see simulation/nestbed-sim.log)"
    ]
    kept = tmp_path / "results" / "simulation" / "nestbed-sim.log"
    assert kept.read_text().endswith('msg="FdNetDevice read error"\n')
