"""What a simulated node runs, without root: the traffic tools' command lines turned into
nestbed-sim commands, and the one sentence for anything else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nestbed.control.simulated import command
from nestbed.errors import Refused

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
