"""A link event on the Linux back end (root): handed to nestbed-linkd ahead of its time,
applied by linkd at that time, and recorded with linkd's answer; a ping's round trip shows
the change. Everything it makes is swapped out at the end and checked gone."""

from __future__ import annotations

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
