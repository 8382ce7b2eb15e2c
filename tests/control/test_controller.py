"""The controller process on the fake back end: events on time, programs' output, status over
one connection, refusals versus bugs, the next run of a reused network, an inherited lock."""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import pytest
from control_helpers import PROGRAM, TWO_NODES, rows, wait_for

from nestbed.control import client as client_module
from nestbed.errors import InternalError, UserError
from nestbed.results import manifest
from nestbed.results.folder import RunFolder


def test_a_program_event_runs_its_command_and_events_csv_has_planned_and_actual_times(fake):
    experiment = fake(PROGRAM)
    start = experiment.launch()
    client = experiment.client
    wait_for(lambda: client.request("status")["links"]["l0"] == "down", "the link event")
    ended = client.request("finish", outcome="completed")
    folder = RunFolder(start.results)
    assert ended == {"ok": True, "outcome": "completed", "reason": None,
                     "results": str(start.results)}  # fmt: skip
    assert (folder.programs / "hello.stdout").read_text() == "hello from a\n"
    [program] = rows(folder.programs_table)
    assert (program["program"], program["node"], program["outcome"]) == ("hello", "a", "ok")
    events = rows(folder.events)
    by_object = {e["object"]: e for e in events}
    hello, down, halt = by_object["hello"], by_object["l0"], by_object["ns"]
    assert (hello["planned_s"], hello["outcome"]) == ("0.2", "ok")
    assert float(hello["actual_s"]) >= 0.2 and float(hello["error_ms"]) >= 0
    assert (down["planned_s"], down["outcome"], down["message"]) == ("0.3", "ok",
                                                                     "link l0 is down")  # fmt: skip
    assert float(down["actual_s"]) >= 0.3
    assert (halt["outcome"], halt["actual_s"]) == ("skipped", "")  # the run ended first
    # The fake link emulator got the link event, and the counters were sampled.
    asked = experiment.backend.linkd(experiment.plan).requests()
    assert {"op": "down", "link": "l0", "mode": "blackhole"} in asked
    assert {r["link"] for r in rows(folder.link_counters)} == {"l0"}
    assert manifest.read(start.results)["outcome"] == "completed"


FIVE_AT_ONCE = (
    TWO_NODES
    + "programs:\n"
    + "".join(f"  - {{name: p{i}, node: {'ab'[i % 2]}, command: 'echo {i}'}}\n" for i in range(5))
    + "events:\n"
    + "".join(f"  - {{at: 0.1, object: p{i}, verb: start}}\n" for i in range(5))
)


def test_a_program_start_is_timed_when_its_process_began_not_when_it_was_asked_for(fake):
    # Five due at one instant: each event's actual time is its own process's beginning (the
    # programs table's started_s, nestbed-spawn's clock), however long the others took.
    experiment = fake(FIVE_AT_ONCE)
    start = experiment.launch()
    folder = RunFolder(start.results)
    wait_for(lambda: folder.programs_table.exists() and len(rows(folder.programs_table)) == 5,
             "the five programs' ends")  # fmt: skip
    experiment.client.request("finish", outcome="completed")
    programs = {r["program"]: r for r in rows(folder.programs_table)}
    events = {e["object"]: e for e in rows(folder.events)}
    for i in range(5):
        program, event = programs[f"p{i}"], events[f"p{i}"]
        assert (program["outcome"], event["outcome"]) == ("ok", "ok")
        assert float(event["actual_s"]) == pytest.approx(float(program["started_s"]), abs=1e-6)
        assert float(event["error_ms"]) >= 0  # handed over ahead of its time, never early
        assert float(event["error_ms"]) == pytest.approx(
            (float(program["started_s"]) - 0.1) * 1e3, abs=1e-3
        )
        assert (folder.programs / f"p{i}.stdout").read_text() == f"{i}\n"
    assert manifest.read(start.results)["versions"]["nestbed-spawn"].startswith("nestbed-spawn")


def test_status_polls_share_one_connection_which_is_opened_again_when_it_broke(fake, monkeypatch):
    opened = []
    real = client_module.SocketClient

    def counting(*args, **kwargs):
        opened.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(client_module, "SocketClient", counting)
    experiment = fake(PROGRAM)
    experiment.launch()
    client = experiment.client
    for _ in range(20):
        assert client.request("status")["experiment"] == experiment.exp.name
    assert len(opened) == 1
    # The controller goes away and a new one comes: the same client reaches the new one.
    client.request("finish")
    client.request("shutdown", timeout=10)
    wait_for(lambda: not client.alive(), "the controller's exit")
    with pytest.raises(UserError, match=r"the controller of experiment .* is not running"):
        client.request("status")
    experiment.launch()
    assert client.request("status")["finished"] is False
    assert len(opened) >= 2 and client.alive()


def test_a_bad_request_is_refused_as_the_users_mistake(fake):
    experiment = fake(PROGRAM)
    experiment.launch()
    client = experiment.client
    with pytest.raises(UserError, match="has no request 'dance'"):
        client.request("dance")
    with pytest.raises(UserError, match="request event has no field 'colour'"):
        client.request("event", object="hello", verb="start", colour="red")
    with pytest.raises(UserError, match="request event lacks its field 'verb'"):
        client.request("event", object="hello")
    with pytest.raises(UserError, match="nosuch"):
        client.request("event", object="nosuch", verb="start")
    wait_for(lambda: client.request("status")["programs"][0]["state"] == "ended", "hello's end")
    reply = client.request("event", object="hello", verb="stop")  # not running: a failed event
    assert (reply["event"]["outcome"], reply["event"]["message"]) == (
        "error", "program hello is not running")  # fmt: skip
    # The connection survived every refusal.
    assert client.request("ping")["ok"]


def test_a_bug_inside_the_controller_is_an_internal_error_with_its_traceback_logged(fake):
    experiment = fake(PROGRAM)
    first = experiment.launch()
    client = experiment.client
    client.request("finish")
    broken = first.model_copy(update={"ir": experiment.tmp / "no-such-ir.json"})
    with pytest.raises(InternalError, match="internal error: FileNotFoundError") as raised:
        client.next_run(broken)
    assert not isinstance(raised.value, UserError)
    log = experiment.log()
    assert "Traceback" in log and "FileNotFoundError" in log
    assert client.alive()  # the controller goes on


def test_next_run_on_the_same_network_keeps_its_options(fake):
    experiment = fake(PROGRAM)
    options = {"capture": True, "cpumon": ("a",), "cpumon_duty": 0.2}
    experiment.launch(**options)
    client = experiment.client
    client.request("finish")
    second = experiment.start(**options).model_copy(update={"reused_runs": 1})
    reply = client.next_run(second)
    assert reply == {"ok": True, "run_id": None, "results": str(second.results)}
    wait_for(lambda: client.request("status")["programs"][0]["state"] == "ended", "hello's end")
    client.request("finish")
    folder = RunFolder(second.results)
    assert manifest.read(second.results)["options"] == {
        "capture": True, "cpumon": ["a"], "cpumon_duty": 0.2, "reused_network_runs_before": 1,
    }  # fmt: skip
    assert sorted(p.name for p in folder.pcaps.glob("*.pcap")) == ["l0-a.pcap", "l0-b.pcap"]
    assert {r["node"] for r in rows(folder.node_cpu)} == {"a"}
    assert (folder.programs / "hello.stdout").read_text() == "hello from a\n"


def test_next_run_brings_up_a_link_the_last_runs_event_took_down(fake):
    # Before, a sweep's reused network kept what the last point's events had done: its next
    # point ran with l0 still down.
    experiment = fake(PROGRAM)
    experiment.launch()
    client = experiment.client
    wait_for(lambda: client.request("status")["links"]["l0"] == "down", "the link event")
    client.request("finish")
    linkd = experiment.backend.linkd(experiment.plan)
    downs = len(linkd.requests())
    client.next_run(experiment.start().model_copy(update={"reused_runs": 1}))
    assert {"op": "up", "link": "l0"} in linkd.requests()[downs:]
    client.request("finish")


def test_next_run_is_refused_while_the_run_goes_on(fake):
    experiment = fake(PROGRAM)
    start = experiment.launch()
    with pytest.raises(UserError, match="has not finished; finish it first"):
        experiment.client.next_run(start)


def test_the_controller_inherits_and_holds_a_passed_lock(fake, tmp_path):
    experiment = fake(PROGRAM)
    lock = tmp_path / "experiment.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        experiment.client.launch(experiment.start(), pass_fds=[fd])
    finally:
        os.close(fd)  # from now on only the controller holds it

    def locked() -> bool:
        probe = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(probe)
        return False

    assert locked()
    experiment.client.request("finish")  # its programs are gone; the lock stays
    assert locked()
    experiment.client.request("shutdown", timeout=10)
    wait_for(lambda: not locked(), "the lock's release at the controller's exit")


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_the_end_of_a_run_ends_the_children_programs_left_behind(fake):
    # stubborn ignores SIGTERM in a child of its shell; orphan leaves a child and exits.
    experiment = fake(
        TWO_NODES
        + """
programs:
  - name: stubborn
    node: a
    command: "(trap '' TERM; exec sleep 300) & echo $! > $NESTBED_PROGRAM_DIR/child; wait"
  - name: orphan
    node: b
    command: "sleep 300 > /dev/null 2>&1 & echo $! > $NESTBED_PROGRAM_DIR/child"
events:
  - {at: 0, object: stubborn, verb: start}
  - {at: 0, object: orphan, verb: start}
"""
    )
    start = experiment.launch()
    folder = RunFolder(start.results)
    children = {
        name: int(wait_for(lambda n=name: _read(folder.programs / n / "child"), f"{name}'s child"))
        for name in ("stubborn", "orphan")
    }
    wait_for(lambda: _read(folder.programs_table) and len(rows(folder.programs_table)) == 1,
             "orphan's exit")  # fmt: skip
    assert all(_running(pid) for pid in children.values())
    experiment.client.request("finish")
    assert not any(_running(pid) for pid in children.values())
    outcomes = {r["program"]: r["outcome"] for r in rows(folder.programs_table)}
    assert outcomes == {"orphan": "ok", "stubborn": "killed"}


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_controller_ends_the_run_as_interrupted(fake, signum):
    experiment = fake(
        TWO_NODES
        + """
programs:
  - {name: long, node: a, command: sleep 300}
events:
  - {at: 0, object: long, verb: start}
"""
    )
    start = experiment.launch()
    client = experiment.client
    wait_for(lambda: client.request("status")["programs"][0]["state"] == "running", "long's start")
    pid = int((experiment.run_dir / "controller.pid").read_text())
    os.kill(pid, signum)
    wait_for(lambda: client.request("status")["finished"], "the run's end")
    ended = manifest.read(start.results)
    name = signal.Signals(signum).name
    assert (ended["outcome"], ended["reason"]) == (
        f"interrupted ({name})",
        f"the controller got {name}",
    )
    assert [r["outcome"] for r in rows(RunFolder(start.results).programs_table)] == ["killed"]
    assert client.alive()  # it still answers, until swap-out shuts it down


def test_a_run_that_cannot_start_ends_as_failed_and_says_why(fake, monkeypatch):
    monkeypatch.setenv("NESTBED_CPUMON", "/nonexistent/nestbed-cpumon")
    experiment = fake(PROGRAM)
    start = experiment.start(capture=True, cpumon=("a",))
    with pytest.raises(InternalError, match="exited at start"):
        experiment.client.launch(start)
    ended = manifest.read(start.results)
    assert ended["outcome"] == "failed"
    assert ended["reason"].startswith("the run could not start: ")
    assert "/nonexistent/nestbed-cpumon" in ended["reason"]


def test_a_controller_started_early_runs_once_launched_and_exits_if_abandoned(fake):
    experiment = fake(PROGRAM)
    experiment.client.prestart()
    early = experiment.client.early
    assert early is not None and early.poll() is None  # loaded, waiting for its document
    experiment.client.launch(experiment.start())
    assert experiment.client.alive() and experiment.client.early is None

    other = fake(PROGRAM)
    other.client.prestart()
    waiting = other.client.early
    assert waiting is not None
    other.client.abandon()  # a swap-in that failed before launching it
    assert waiting.returncode == 0 and not other.client.alive()
