"""What a simulated node runs, without root: the traffic tools' command lines turned into
nestbed-sim commands, the one sentence for anything else, and a tool's state when a request
about it fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nestbed.backend.sim import SimulatedProcess
from nestbed.control.simulated import command
from nestbed.errors import EnvironmentProblem, Refused

OUT = Path("/r/traffic/raw/cbr0-0.send")


def test_probe_command_lines_become_udp_tools():
    recv = ["/x/nestbed-probe", "recv", "--bind", "10.1.1.3:20000", "--log", "/r/my log.csv"]
    assert command("t1", "r2", recv, OUT) == (
        "udp-recv t1 r2 20000 /r/my%20log.csv /r/traffic/raw/cbr0-0.send"
    )
    send = ["nestbed-probe", "send", "--to", "10.1.1.3:20000", "--size", "500",
            "--interval", "0.004", "--count", "10"]  # fmt: skip
    assert command("t2", "r1", send, OUT).split()[:8] == [
        "udp-send", "t2", "r1", "10.1.1.3", "20000", "500", "0.004", "10",
    ]  # fmt: skip
    until_stopped = [*send[:-2], "--duration", "1000000"]
    assert command("t3", "r1", until_stopped, OUT).split()[7] == "250000000"


def test_bulk_command_lines_become_tcp_tools():
    bulk = [sys.executable, "-m", "nestbed.control.bulk"]
    recv = [*bulk, "recv", "--port", "20064", "--bind", "10.1.2.3", "--window", "28960"]
    assert command("t", "r1", recv, OUT).split()[:5] == ["tcp-recv", "t", "r1", "20064", "28960"]
    send = [*bulk, "send", "--port", "20064", "--to", "10.1.2.3", "--bytes", "1000000",
            "--congestion", "reno"]  # fmt: skip
    assert command("t", "r1", send, OUT).split()[:8] == [
        "tcp-send", "t", "r1", "10.1.2.3", "20064", "1000000", "0", "reno",
    ]  # fmt: skip
    unlimited = [*bulk, "send", "--port", "20064", "--to", "10.1.2.3"]
    assert command("t", "r1", unlimited, OUT).split()[5:8] == ["0", "0", "-"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sh", "-c", "ls"], "simulated node r1 has no operating system to run sh; only the "
                             "traffic of its agents runs there"),
        (["nestbed-probe", "send", "--to", "a:1", "--echo", "1"],
         "a simulated node's probe send has no option --echo"),
    ],
)  # fmt: skip
def test_anything_else_is_refused_in_one_sentence(argv, message):
    with pytest.raises(Refused) as caught:
        command("t", "r1", argv, OUT)
    assert str(caught.value) == message


class Flaky:
    """A nestbed-sim that runs, or not, whose next FAILS requests fail (an agent too slow to
    answer a cluster's request, say), and which records the tools stopped."""

    def __init__(self, fails: int, runs: bool = True):
        self.fails, self.runs, self.stopped = fails, runs, []

    def request(self, *words):  # as sim.Simulator's
        if self.fails:
            self.fails -= 1
            raise EnvironmentProblem("host h1 did not answer in 30 s")
        if words[0] == "stop":
            self.stopped.append(words[1])
        return {"done": words[0] == "stop"}

    def running(self) -> bool:
        return self.runs


def test_a_failed_request_does_not_pass_for_the_tools_end_while_nestbed_sim_runs():
    """Before, any failed request marked the tool ended: linktest then never stopped it, and
    its port stayed taken for the next round ("udp-recv: UDP port 40000 is taken")."""
    channel = Flaky(fails=1)
    tool = SimulatedProcess(channel, "t1", ["nestbed-probe", "recv"])
    assert tool.poll() is None  # the failure: still running, as far as anyone knows
    tool.kill()  # the first stop fails, the second is sent
    assert channel.stopped == ["t1"] and tool.returncode == 0
    gone = Flaky(fails=5, runs=False)
    ended = SimulatedProcess(gone, "t2", ["nestbed-probe", "recv"])
    assert ended.poll() == 1  # nestbed-sim is gone: so is the tool
    stubborn = Flaky(fails=5)
    left = SimulatedProcess(stubborn, "t3", ["nestbed-probe", "recv"])
    left.kill()  # two stops fail: given up on, so that no caller waits on it for ever
    assert left.returncode == 1 and stubborn.fails == 3


def test_a_tool_nestbed_sim_does_not_have_has_ended():
    """nestbed-sim's refusal is an answer: the tool is not there, and waiting for it to end
    would wait for ever."""

    class Forgetful(Flaky):
        def request(self, *words):  # as sim.Simulator's
            raise Refused(f"the simulated part refused it: {words[0]}: no tool {words[1]}")

    tool = SimulatedProcess(Forgetful(fails=0), "t4", ["nestbed-probe", "recv"])
    assert tool.wait(timeout=5) == 1
