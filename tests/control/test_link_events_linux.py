"""A link event on the Linux back end (root): handed to nestbed-linkd ahead of its time,
applied by linkd at that time, and recorded with linkd's answer; a ping's round trip shows
the change. Everything it makes is swapped out at the end and checked gone."""

from __future__ import annotations

import csv
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from nestbed.backend.plan import plan
from nestbed.control.actions import Actions
from nestbed.control.links import LinkStates
from nestbed.control.scheduler import Scheduler
from nestbed.model import Action
from nestbed.results.tables import EVENT_COLUMNS, Table
from nestbed.spec import load

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="builds network namespaces (root)")

LINKED = """
nodes: [{name: a}, {name: b}]
links: [{name: l0, members: [a, b], bandwidth: 100Mb, delay: 5ms}]
"""
RTT = re.compile(r"rtt min/avg/max/mdev = ([0-9.]+)/")


def _smallest_rtt_ms(backend: Any, p: Any, address: str) -> float:
    done = backend.exec_in(p, "a", ["ping", "-n", "-q", "-c", "3", "-i", "0.05", "-W", "2",
                                    address], capture_output=True, text=True)  # fmt: skip
    found = RTT.search(done.stdout)
    assert found, f"no round trip: {done.stdout!r} {done.stderr!r}"
    return float(found[1])


def test_a_link_event_is_applied_by_linkd_at_its_time_and_its_row_has_linkds_answer(
    tmp_path: Path,
):
    from nestbed.backend.linux import LinuxBackend

    source = tmp_path / "i18t-le.yaml"
    source.write_text(LINKED)
    exp = load(source, name=f"i18t-le-{os.getpid()}").experiment
    p = plan(exp)
    backend = LinuxBackend()
    backend.swap_in(p)
    try:
        b = next(port.ip for link in exp.all_links for port in link.ports if port.node == "b")
        before_ms = _smallest_rtt_ms(backend, p, b)
        links = LinkStates(exp, p, backend)
        channel = links.channel = backend.linkd(p)
        replies: list[dict[str, Any]] = []
        asked = channel.request

        def kept(op: str, **fields: Any) -> dict[str, Any]:
            reply = asked(op, **fields)
            replies.append(reply)
            return reply

        channel.request = kept  # type: ignore[method-assign]
        events = Table(tmp_path / "events.csv", EVENT_COLUMNS)
        rows: list[dict[str, Any]] = []
        events.add = rows.append  # type: ignore[method-assign]
        scheduler = Scheduler(lambda *a: None)
        actions = Actions(exp, scheduler, links, {}, {}, None, events, lambda *a: None)  # type: ignore[arg-type]
        due = time.monotonic() + 0.3
        action = Action(object="l0", verb="delay", args=("60ms",))
        actions.perform(action, "static", due - scheduler.t0, due)
        links.close()
        after_ms = _smallest_rtt_ms(backend, p, b)
    finally:
        backend.swap_out(p)
    assert not [t for t in backend.traces() if p.tag in t or exp.name in t]
    (row,) = rows
    assert row["outcome"] == "ok", row
    (reply,) = replies  # one `at`, with both pipes' changes
    assert reply["applied_ns"] >= reply["at_ns"] >= due * 1e9  # not before its time
    assert row["actual_s"] == reply["applied_ns"] / 1e9 - scheduler.t0  # linkd's own time
    assert row["error_ms"] >= 0.0
    assert before_ms < 60 <= after_ms, (before_ms, after_ms)


def _run_experiment(name: str, command: str | None) -> Any:
    from nestbed.api import Experiment

    exp = Experiment(name)
    a, b = exp.node("a"), exp.node("b")
    link = exp.link(a, b, name="l0", bandwidth="100Mb", delay="5ms")
    if command is not None:
        exp.at(0.2, exp.program("pinger", a, command), "start")
    exp.at(1.5, link, "delay", "60ms")
    exp.at(4.5, "ns", "halt")
    return exp.build()


def test_in_a_whole_run_a_link_event_takes_effect_at_its_time_and_its_row_says_so(
    tmp_path: Path,
):
    from nestbed.lifecycle.runs import run_alone
    from nestbed.model.options import RunOptions
    from nestbed.results.folder import RunFolder

    name = f"i18t-run-{os.getpid()}"
    ir = _run_experiment(name, None)  # (the same addresses, to name b's in the command)
    b = next(port.ip for link in ir.all_links for port in link.ports if port.node == "b")
    ir = _run_experiment(name, f"ping -n -i 0.1 -c 30 -W 2 {b}")
    results = tmp_path / "results"
    run_alone(tmp_path / "store.db", ir, RunOptions(results=results, report=False))
    folder = RunFolder(results)
    with folder.events.open() as f:
        (row,) = [r for r in csv.DictReader(f) if r["object"] == "l0"]
    assert row["outcome"] == "ok", row
    assert float(row["actual_s"]) >= float(row["planned_s"]) == 1.5
    # ping's replies: icmp_seq N was sent about 0.2 + 0.1 (N - 1) s into the run
    replies = re.findall(r"icmp_seq=(\d+) .*time=([0-9.]+) ms", (folder.programs /
                         "pinger.stdout").read_text())  # fmt: skip
    rtt = {int(seq): float(ms) for seq, ms in replies}
    early = [ms for seq, ms in rtt.items() if seq <= 8]  # sent by 0.9 s
    late = [ms for seq, ms in rtt.items() if seq >= 22]  # sent from 2.3 s on
    assert early and late, rtt
    assert max(early) < 60 <= min(late), rtt
