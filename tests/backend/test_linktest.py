"""linktest on real namespaces: every example passes, and each fault made on purpose behind
nestbed's back is reported on exactly its link and direction, and nothing else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nbtest import EXAMPLES, experiment
from nestbed.backend import linux
from nestbed.backend.linux import LinuxBackend
from nestbed.backend.plan import pipe_params, plan
from nestbed.errors import EnvironmentProblem
from nestbed.lifecycle import Testbed
from nestbed.linktest import run as linktest_run
from nestbed.linktest.run import Check, Report, linktest
from nestbed.model import Shaping
from nestbed.model.options import RunOptions
from nestbed.spec import load
from nestbed.store import State, Store

pytestmark = pytest.mark.root

CHAIN = """
routing: static
nodes: [{name: a}, {name: r}, {name: b}]
links:
  - {name: ar, members: [a, r], bandwidth: 10Mb, delay: 10ms}
  - {name: rb, members: [r, b], bandwidth: 10Mb, delay: 5ms, loss: 0.05}
"""


def chain(name: str):
    return experiment(CHAIN, name)


def failures(report: Report) -> list[tuple[int, str, str]]:
    return [(c.level, c.link, c.direction) for c in report.failures]


def set_pipe(p, link: str, port: str, shaping: Shaping) -> None:
    """Changes one pipe directly on linkd, as a fault nestbed did not make."""
    client = linux.linkd(p)
    try:
        client.request("set", link=link, port=port, direction="egress", params=pipe_params(shaping))
    finally:
        client.close()


def test_a_healthy_chain_passes_every_level(swapped):
    exp = chain("lt-ok")
    report = linktest(swapped(exp), exp, 4)
    assert failures(report) == [], linktest_run.markdown(report)
    levels = {c.level for c in report.checks}
    assert levels == {1, 2, 3, 4}
    assert len([c for c in report.checks if c.level == 4]) == 4  # every shaped direction


def test_a_shaping_removed_behind_nestbeds_back_is_caught_on_its_direction_only(swapped):
    exp = chain("lt-unshaped")
    p = swapped(exp)
    set_pipe(p, "ar", "a", Shaping())
    report = linktest(p, exp, 1)
    assert failures(report) == [(1, "ar", "a → r")], linktest_run.markdown(report)
    assert "less than" in report.failures[0].reason


def test_a_wrong_delay_set_on_linkd_is_caught_on_its_direction_only(swapped):
    exp = chain("lt-delay")
    p = swapped(exp)
    right = exp.links[1].port("b").egress
    set_pipe(p, "rb", "b", right.model_copy(update={"delay_s": 0.015}))
    report = linktest(p, exp, 1)
    assert failures(report) == [(1, "rb", "b → r")], linktest_run.markdown(report)
    assert "more than" in report.failures[0].reason


def test_a_route_deleted_inside_a_node_is_caught_on_its_pair_only(swapped):
    exp = chain("lt-route")
    p = swapped(exp)
    subprocess.run(["ip", "netns", "exec", p.node("a").netns, "ip", "route", "del", "default"],
                   check=True)  # fmt: skip
    report = linktest(p, exp, 2)
    assert failures(report) == [(2, "ar rb", "a → b (10.1.2.3)")], linktest_run.markdown(report)
    reason = report.failures[0].reason
    assert reason.startswith("none of ") and reason.endswith("datagrams arrived along a→r r→b")


def test_a_changed_loss_rate_is_caught_on_its_direction_only(swapped):
    exp = chain("lt-loss")
    p = swapped(exp)
    right = exp.links[1].port("r").egress
    set_pipe(p, "rb", "r", right.model_copy(update={"loss": 0.2}))
    report = linktest(p, exp, 3)
    assert failures(report) == [(3, "rb", "r → b")], linktest_run.markdown(report)
    assert "configured 5.00%" in report.failures[0].reason


STARVED = """
routing: static
nodes: [{name: a, cpu: 0.05}, {name: b}]
links:
  - {name: ab, members: [a, b], bandwidth: 10Mb, delay: 2ms, queue: {limit: 4}}
"""


def test_a_cpu_starved_senders_bursts_overflow_the_queue_and_are_not_blamed_on_the_link(swapped):
    # a's quota lets it run 5 ms of every 100: its probe sends the datagrams it is late
    # with at once, more than the 4-packet queue holds.
    exp = experiment(STARVED, "lt-starved")
    report = linktest(swapped(exp), exp, 3)
    loss = {c.direction: c for c in report.checks if c.level == 3}
    assert loss["a → b"].numbers["queue_drops"] > 0, linktest_run.markdown(report)
    assert "queue dropped" in loss["a → b"].reason
    assert [c for c in loss.values() if c.verdict == "fail"] == [], linktest_run.markdown(report)


class _ReceiversHeld(LinuxBackend):
    """This machine, with every probe receiver stopped from the moment it listens until the
    senders of its round have sent everything: a receiver a busy host did not schedule for
    the whole test, its datagrams waiting in its socket."""

    def __init__(self) -> None:
        self.held: list[subprocess.Popen] = []
        self.stopped = 0

    def wait_listening(self, process, port, proto, timeout=5):  # type: ignore[override]
        LinuxBackend.wait_listening(process, port, proto, timeout)
        os.kill(process.pid, signal.SIGSTOP)
        self.held.append(process)
        self.stopped += 1

    def start_in(self, plan, node, argv, **popen):  # type: ignore[override]
        process = LinuxBackend.start_in(plan, node, argv, **popen)
        return _Releasing(process, self.held) if argv[1] == "send" else process


class _Releasing:
    """A sender whose end lets the held receivers go on."""

    def __init__(self, process: subprocess.Popen, held: list[subprocess.Popen]):
        self.process, self.held = process, held

    def communicate(self, timeout=None):
        try:
            return self.process.communicate(timeout=timeout)
        finally:
            while self.held:
                os.kill(self.held.pop().pid, signal.SIGCONT)

    def __getattr__(self, name):
        return getattr(self.process, name)


def test_latency_is_the_links_even_when_the_receiving_probe_waits_for_a_core(swapped):
    # Timed when the probe read them, the datagrams' delays would be the time its receiver
    # was stopped (the whole test), and every direction would fail level 1.
    exp = experiment(
        "nodes: [{name: a}, {name: b}]\n"
        "links: [{name: ab, members: [a, b], bandwidth: 10Mb, delay: 3ms}]\n",
        "lt-held",
    )
    backend = _ReceiversHeld()
    report = linktest(swapped(exp), exp, 1, backend=backend)
    assert backend.stopped >= 2, "the receivers were not held"
    latency = [c for c in report.checks if c.level == 1]
    assert len(latency) == 2 and failures(report) == [], linktest_run.markdown(report)


@pytest.mark.parametrize(
    ("example", "level"),
    [("dumbbell.ns", 4), ("lan.ns", 3), ("linear.ns", 3), ("tree.ns", 2)],
)
def test_every_example_passes(swapped, example, level):
    exp = load(EXAMPLES / example).experiment
    exp = exp.model_copy(update={"name": f"{exp.name}-lt{os.getpid()}"})
    report = linktest(swapped(exp), exp, level)
    assert failures(report) == [], linktest_run.markdown(report)
    assert not [c for c in report.checks if c.verdict == "skip"]


def test_a_strict_linktest_that_fails_fails_the_swap_in_and_removes_everything(
    tmp_path: Path, monkeypatch
):
    def failing(p, exp, level, **_):
        return Report(exp.name, level, [Check(1, "ar", "a → r", "10 ms", "0 ms", "fail", "x")])

    monkeypatch.setattr("nestbed.linktest.run.linktest", failing)
    exp = chain("lt-strict")
    with Store.open(str(tmp_path / "s.db")) as store:
        store.create_experiment(exp.name, source_text="", source_format="yaml",
                                source_file=None, ir_json=exp.to_json())  # fmt: skip
        with pytest.raises(EnvironmentProblem, match="linktest level 1 found 1 failed checks"):
            options = RunOptions(results=tmp_path / "r", linktest=1, linktest_strict=True)
            Testbed(store, LinuxBackend()).swap_in(exp.name, options)
        assert store.get(exp.name).state == State.FAILED
    assert not [t for t in linux.traces() if plan(exp).tag in t]
    assert (tmp_path / "r" / "linktest" / "linktest.md").exists()


def nestbed(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nestbed", "--db", str(cwd / "s.db"), *args],
        capture_output=True, text=True, cwd=cwd,
    )  # fmt: skip


def test_linktest_command_and_ns_linktest_event(tmp_path: Path):
    name = f"ltev{os.getpid()}"
    source = tmp_path / f"{name}.ns"
    source.write_text(
        textwrap.dedent(
            """\
            set ns [new Simulator]
            source tb_compat.tcl
            set a [$ns node]
            set b [$ns node]
            set link0 [$ns duplex-link $a $b 10Mb 5ms DropTail]
            $ns at 0.5 "$ns linktest 1"
            """
        )
    )
    results = tmp_path / "results"
    swapin = nestbed("swapin", str(source), "--results", str(results), "--linktest", "1",
                     cwd=tmp_path)  # fmt: skip
    assert swapin.returncode == 0, swapin.stderr
    try:
        assert "level 1: connectivity and latency" in swapin.stdout
        check = nestbed("linktest", name, "--level", "2", "--json", cwd=tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        data = json.loads(check.stdout)
        assert data["passed"] and data["counts"]["fail"] == 0 and data["level"] == 2
        bad = nestbed("linktest", name, "--level", "9", cwd=tmp_path)
        assert bad.returncode == 2
        assert bad.stderr.strip() == (
            "error: linktest level 9 does not exist; use 1 to 4 (1 connectivity and latency, "
            "2 routing, 3 loss, 4 bandwidth)"
        )
    finally:
        out = nestbed("swapout", name, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    # swap-in's, the event's (level 1) and the command's reports, each in its own folder.
    reports = sorted(d.name for d in results.iterdir() if d.name.startswith("linktest"))
    assert reports == ["linktest", "linktest-2", "linktest-3"]
    levels = sorted(json.loads((results / r / "linktest.json").read_text())["level"]
                    for r in reports)  # fmt: skip
    assert levels == [1, 1, 2]
    events = (results / "events.csv").read_text()
    assert "linktest level 1 started" in events
    inactive = nestbed("linktest", name, cwd=tmp_path)
    assert inactive.returncode == 2
    assert "is swapped, not active; swap it in first" in inactive.stderr
