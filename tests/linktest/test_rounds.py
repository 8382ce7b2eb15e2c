"""A round of linktest probes, as pure logic over a recording back end: no sender starts
before its receiver was heard listening, whatever kind of process object the back end gives
(a cluster's commands are proxies, not ``subprocess.Popen``)."""

from __future__ import annotations

import json
from typing import Any

from nbtest import experiment
from nestbed.backend.plan import plan
from nestbed.linktest.run import Report, _Probe, _Tester

PAIR = """
nodes: [{name: a}, {name: b}]
links: [{name: l0, members: [a, b], delay: 1ms}]
"""


class _Command:
    """A started command as a cluster's back end gives it: Popen's methods, not its class."""

    def __init__(self, argv: list[str]):
        self.args, self.returncode = argv, None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.returncode = 0
        role = self.args[1]
        summary = {"packets_sent": 3} if role == "send" else {"unique": 3}
        return json.dumps(summary), ""

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = 0
        return 0

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.returncode = -15

    def kill(self) -> None:
        self.returncode = -9


class _Recording:
    """The two back-end calls a round makes, written down in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def run_dir(self, _plan: Any) -> Any:
        raise AssertionError("no simulated node here")

    def start_in(self, _plan: Any, node: str, argv: list[str], **_popen: Any) -> _Command:
        self.calls.append(("start " + argv[1], node))
        return _Command(argv)

    def wait_listening(self, process: _Command, port: int, proto: str, timeout: float = 5) -> None:
        self.calls.append((f"listening {proto} {port}", process.args[1]))


def test_no_sender_starts_before_its_receiver_listens_whatever_the_process_object():
    # A round on a cluster once started its senders at once: the receivers' proxies were not
    # Popen objects, so nobody waited for them to listen, and the first datagrams of a loss
    # test (40 of 2000 at 10 000 packets/s) met a closed port and were counted as lost.
    exp = experiment(PAIR, "rounds")
    backend = _Recording()
    tester = _Tester(backend, plan(exp), Report(exp.name, 3, []))  # type: ignore[arg-type]
    probe = _Probe("a", "b", "10.0.0.2", "10.0.0.1", ["--count", "3"], ["--count", "3"])
    tester._round([probe])
    assert backend.calls == [
        ("start recv", "b"),
        ("listening udp 40000", "recv"),
        ("start send", "a"),
    ]
    assert probe.sent == {"packets_sent": 3} and probe.received == {"unique": 3}
