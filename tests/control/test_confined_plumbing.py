"""The options that confine an experiment's processes (``RunOptions.run_as``), from the start
document to what the controller asks of its back end, on the fake back end (no root): the
experiment's own processes (programs, traffic tools) are confined, nestbed's (captures) are
not; their folders are handed over; the environment is pruned and the working folder set."""

from __future__ import annotations

import subprocess
from pathlib import Path

from control_helpers import TWO_NODES, rows, wait_for

from nestbed.control.traffic import CbrFlow
from nestbed.model.options import ControllerStart, RunAs, RunOptions
from nestbed.results.folder import RunFolder

PROJECT = RunAs(uid=1_900_000_007, gid=1_900_000_007)

CONFINED = (
    TWO_NODES
    + """
programs:
  - {name: where, node: a, command: 'echo "$PWD $HOME ${I22D_SERVER_SECRET:-none}"'}
events:
  - {at: 0.1, object: where, verb: start}
"""
)


def test_run_as_travels_in_the_controllers_start_document():
    start = ControllerStart(backend="fake", ir="/x/ir.json", results="/x/run",
                            options=RunOptions(run_as=PROJECT))  # fmt: skip
    again = ControllerStart.model_validate_json(start.model_dump_json())
    assert again.options.run_as == PROJECT
    assert ControllerStart.model_validate_json(
        start.model_copy(update={"options": RunOptions()}).model_dump_json()
    ).options.run_as is None  # fmt: skip


def test_root_is_never_an_identity_to_run_as():
    import pydantic
    import pytest

    with pytest.raises(pydantic.ValidationError):
        RunAs(uid=0, gid=1_900_000_007)


def test_a_confined_run_confines_programs_and_tools_and_not_captures(fake, monkeypatch):
    monkeypatch.setenv("I22D_SERVER_SECRET", "the-servers")  # the controller inherits it
    experiment = fake(CONFINED)
    start = experiment.launch(run_as=PROJECT, capture=True)
    client = experiment.client
    # Its program has ended (no pending event is not enough: the start may still be under
    # way, and a loaded machine then saw the run end before the program did).
    wait_for(lambda: [p["state"] for p in client.request("status")["programs"]] == ["ended"],
             "the program's end")  # fmt: skip
    client.request("finish", outcome="completed")
    folder = RunFolder(start.results)
    journal = experiment.backend.journal()
    confined = [j["argv"] for j in journal if j["op"] == "confine"]
    assert all((j["uid"], j["gid"]) == (PROJECT.uid, PROJECT.gid)
               for j in journal if j["op"] == "confine")  # fmt: skip
    started = [j["argv"] for j in journal if j["op"] == "start_in"]
    # The program, confined, was started by nestbed-spawn in its node as the back end enters
    # it (``entering``); captures by the back end, not confined.
    programs = [a for a in confined if a[:2] == ["sh", "-c"] and "echo" in a[2]]
    captures = [a for a in started if a[:2] == ["sh", "-c"] and "sleep" in a[2]]
    assert programs and captures
    assert not any(a in confined for a in captures)
    assert not any(a[:2] == ["sh", "-c"] and "echo" in a[2] for a in started)
    assert "a" in {j["node"] for j in journal if j["op"] == "entering"}
    handed = {j["path"] for j in journal if j["op"] == "hand_over"}
    assert {str(folder.work("a")), str(folder.work("b")), str(folder.program("where"))} <= handed
    # The program started in its node's working folder, which is also its home, and the
    # controller's environment did not follow it.
    work = folder.work("a")
    assert (folder.programs / "where.stdout").read_text() == f"{work} {work} none\n"
    assert [r["outcome"] for r in rows(folder.programs_table)] == ["ok"]
    # At the run's end, once every process of it was started and ended, the back end is
    # asked to bring back what was left in the nodes' working folders where they ran.
    ops = [j["op"] for j in journal]
    (asked,) = [j for j in journal if j["op"] == "bring_back"]
    assert asked["folders"] == {"a": str(folder.work("a")), "b": str(folder.work("b"))}
    assert ops.index("bring_back") > max(i for i, op in enumerate(ops) if op == "start_in")


def test_a_run_without_run_as_confines_nothing(fake, monkeypatch):
    monkeypatch.setenv("I22D_SERVER_SECRET", "the-users-own")
    experiment = fake(CONFINED)
    start = experiment.launch()
    client = experiment.client
    # Its program has ended, as in the confined run above: with no pending event its start
    # may still be under way, and the run's end then stopped it before it wrote (1 run in 12).
    wait_for(lambda: [p["state"] for p in client.request("status")["programs"]] == ["ended"],
             "the program's end")  # fmt: skip
    client.request("finish", outcome="completed")
    journal = experiment.backend.journal()
    assert not [j for j in journal if j["op"] in ("confine", "hand_over")]
    folder = RunFolder(start.results)
    assert not (start.results / "work").exists()
    assert (folder.programs / "where.stdout").read_text().endswith(" the-users-own\n")


class _Controller:
    """What a flow sees of its controller, writing down what the flow asks of it."""

    def __init__(self, tmp_path: Path):
        self.folder = RunFolder(tmp_path / "run")
        self.asked: list[tuple[str, object]] = []

    def spawn_user(self, node: str, argv: list[str], output: Path) -> subprocess.Popen:
        self.asked.append(("spawn_user", argv[1]))
        return subprocess.Popen(["true"])

    def writable(self, path: Path) -> None:
        self.asked.append(("writable", path.name))

    def listening(self, process: subprocess.Popen, port: int, proto: str) -> None:
        pass

    def now_s(self) -> float:
        return 0.0


def test_a_cbr_flows_tools_are_the_experiments_and_may_write_their_log(tmp_path):
    from nestbed.model import Agent, Application

    ctl = _Controller(tmp_path)
    app = Application(name="cbr0", kind="cbr", agent="udp0")
    agent = Agent(name="udp0", kind="udp", node="a", peer="null0")
    flow = CbrFlow(app, agent, "a", "b", "10.1.1.3", 0, ctl)
    flow.prepare()
    flow.start()
    assert ctl.asked == [("writable", "cbr0-0.log"), ("spawn_user", "recv"),
                         ("spawn_user", "send")]  # fmt: skip


def test_a_program_in_its_dir_runs_a_whole_list_of_commands(fake, tmp_path):
    # The working folder of a confined program is its dir: `cd D && exec a > f && b` would
    # have run `a` alone.
    (tmp_path / "there").mkdir()
    listed = (
        TWO_NODES
        + f"""
programs:
  - {{name: both, node: a, dir: {tmp_path / "there"}, command: 'echo one > f && cat f && pwd'}}
events:
  - {{at: 0, object: both, verb: start}}
"""
    )
    experiment = fake(listed)
    start = experiment.launch()
    client = experiment.client
    wait_for(lambda: client.request("status")["pending_events"] == 0, "the last event")
    wait_for(lambda: rows(RunFolder(start.results).programs_table), "the program's end")
    client.request("finish", outcome="completed")
    said = (RunFolder(start.results).programs / "both.stdout").read_text()
    assert said == f"one\n{tmp_path / 'there'}\n"
