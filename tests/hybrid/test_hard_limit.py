"""The simulated part's hard limit, the lag behind real time a run may have before it is
marked, as an experiment sets it: ns-2's `Scheduler/RealTime set maxslop_` in a Tcl file,
`simulation: {hard_limit: ...}` in YAML, `exp.simulation(hard_limit=...)` in Python; through
to what nestbed-sim is told and to the run's reason. Without root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nbtest import build
from nestbed.api import Experiment
from nestbed.backend import sim
from nestbed.backend.plan import plan
from nestbed.control.simlag import SimulationLag
from nestbed.errors import SpecError
from nestbed.results.folder import RunFolder
from nestbed.spec import load
from nestbed.spec.export import to_document, to_ns
from nestbed.spec.yaml import write as write_yaml

TCL = """set ns [new Simulator]
source tb_compat.tcl
set h1 [$ns node]
$ns make-simulated {
    set r1 [$ns node]
    $ns duplex-link $h1 $r1 100Mb 0ms DropTail
}
"""
YAML = """
nodes: [{name: h1}, {name: r1, simulated: true}]
links: [{name: a1, members: [h1, r1], simulated: true}]
"""


def _tcl(tmp_path: Path, tail: str, head: str = TCL) -> Path:
    path = tmp_path / "t.ns"
    path.write_text(head + tail + "$ns run\n")
    return path


def _told(exp) -> str:  # type: ignore[no-untyped-def]
    """The hard limit line of nestbed-sim's description."""
    description = plan(exp).simulation.description({"link0": 3, "a1": 3})
    return description.splitlines()[0]


def test_each_front_end_gives_nestbed_sim_the_experiments_hard_limit(tmp_path):
    from_tcl = load(_tcl(tmp_path, "Scheduler/RealTime set maxslop_ 0.002\n")).experiment
    from_yaml = build(YAML + "simulation: {hard_limit: 2ms}\n")
    api = Experiment("api")
    h1, r1 = api.node("h1"), api.node("r1", simulated=True)
    api.link(h1, r1, name="a1", simulated=True)
    api.simulation(hard_limit="2ms")
    from_api = api.build()
    for exp in (from_tcl, from_yaml, from_api):
        assert exp.simulation_hard_limit_s == 0.002
        assert _told(exp) == "hard_limit_s 0.002"
    # Not set: nse's 5 ms, and the IR says nothing of its own.
    default = build(YAML)
    assert default.simulation_hard_limit_s is None
    assert _told(default) == "hard_limit_s 0.005"


def test_a_script_reads_back_the_hard_limit_in_force(tmp_path):
    exp = load(_tcl(tmp_path, "set opt(before) [Scheduler/RealTime set maxslop_]\n"
                              "Scheduler/RealTime set maxslop_ 0.25\n"
                              "set opt(after) [Scheduler/RealTime set maxslop_]\n")).experiment  # fmt: skip
    # nestbed's default before it is set (ns-2's own is 0.010), then the value set.
    assert (exp.env["before"], exp.env["after"]) == ("0.005", "0.25")
    assert exp.simulation_hard_limit_s == 0.25
    # Other class settings of the scheduler are still ns-2's alone: a warning, no effect.
    other = load(_tcl(tmp_path, "Scheduler/RealTime set adjust_new_width_interval_ 10\n"))
    assert other.experiment.simulation_hard_limit_s is None
    assert any("Scheduler/RealTime" in w.message for w in other.experiment.warnings)


@pytest.mark.parametrize("value", ["-1", "0", "fast"])
def test_a_hard_limit_that_is_not_a_positive_delay_is_refused_at_its_line(tmp_path, value):
    with pytest.raises(SpecError) as tcl:
        load(_tcl(tmp_path, f"\nScheduler/RealTime set maxslop_ {value}\n"))
    assert str(tcl.value) == (
        f"t.ns:9: the simulation's hard limit '{value}' is not a positive delay; write one "
        "in s, ms, us or ns (for example 5ms)"
    )
    with pytest.raises(SpecError) as yaml:
        build(YAML + f"simulation:\n  hard_limit: '{value}'\n")
    assert str(yaml.value).startswith("t.yaml:5: the simulation's hard limit")


def test_a_hard_limit_without_simulated_nodes_is_a_warning_at_its_line(tmp_path):
    plain = "set ns [new Simulator]\nsource tb_compat.tcl\nset a [$ns node]\nset b [$ns node]\n"
    exp = load(_tcl(tmp_path, "$ns duplex-link $a $b 1Mb 1ms DropTail\n"
                              "Scheduler/RealTime set maxslop_ 0.01\n", head=plain)).experiment  # fmt: skip
    assert [(w.message, w.where.line) for w in exp.warnings] == [
        ("the simulation's hard limit has no effect: the experiment has no simulated nodes "
         "(make-simulated in Tcl, simulated: true in YAML)", 6)
    ]  # fmt: skip


def test_the_hard_limit_survives_conversion_both_ways(tmp_path):
    exp = load(_tcl(tmp_path, "Scheduler/RealTime set maxslop_ 0.0125\n")).experiment
    (tmp_path / "c.yaml").write_text(write_yaml(to_document(exp)))
    (tmp_path / "c.ns").write_text(to_ns(exp))
    for converted in ("c.yaml", "c.ns"):
        assert load(tmp_path / converted).experiment.simulation_hard_limit_s == 0.0125


def _lag_of_a_run(tmp_path: Path, exp, seconds: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The reason's words about a run whose nestbed-sim logged the lag lines ``seconds``."""
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / sim.LOG).write_text("ready\n")
    with subprocess.Popen(["sleep", "30"]) as alive:
        (directory / sim.PID).write_text(f"{alive.pid}\n")
        record = SimulationLag(plan(exp), sim.LocalSimulator(directory))
        with (directory / sim.LOG).open("a") as log:
            log.write(seconds)
        problems = record.record(RunFolder(tmp_path / "results"))
        alive.kill()
    return problems


@pytest.mark.parametrize(
    ("limit", "said"),
    [
        ("10ms", []),
        ("1ms", ["the simulated part fell behind real time by up to 9.0 ms, more than the "
                 "1 ms allowed, in 2 of 2 seconds (see simulation/lag.csv)"]),
        ("250us", ["the simulated part fell behind real time by up to 9.0 ms, more than the "
                   "250 µs allowed, in 2 of 2 seconds (see simulation/lag.csv)"]),
    ],
)  # fmt: skip
def test_a_run_is_marked_by_the_experiments_own_hard_limit(tmp_path, limit, said):
    exp = build(YAML + f"simulation: {{hard_limit: {limit}}}\n")
    seconds = "lag 1 0.002000 0.002000 0\nlag 2 0.009000 0.009000 4\n"
    assert _lag_of_a_run(tmp_path, exp, seconds) == said
