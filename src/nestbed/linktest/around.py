"""What the experiment itself does to its links while a linktest runs on it, so that linktest
is never fooled by it: the file's link events (a `$ns at 8 "$bottleneck down"` that falls in a
level), its traffic (a CBR or FTP that shares a link while a level measures it), and any other
traffic linkd's counters show on a link just before or after the test.

Checks of such links, at the levels it touches, are reported as not tested with the reason,
never as failures. Which level ran when is known from the controller's elapsed time before
and after the test and the report's seconds per level. Pure: the controller's statuses come
in as dictionaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nestbed.backend.plan import Plan
from nestbed.linktest import expect
from nestbed.model import Experiment

TRAFFIC_LEVELS = (1, 3, 4)  # levels whose measures queueing from other packets distorts
ROUTING = 2  # one datagram per path: only a link going down or up fools it


@dataclass(frozen=True)
class Window:
    """When a level ran, in the run's elapsed seconds (wide enough to hold it surely)."""

    level: int
    start_s: float
    end_s: float


def windows(started_s: float, ended_s: float, level_seconds: Mapping[int, float]) -> list[Window]:
    """Each level's window: linktest began between ``started_s`` and ``ended_s`` minus its
    levels' seconds, so a level lies within its earliest start and its latest end."""
    slack = max(0.0, (ended_s - started_s) - sum(level_seconds.values()))
    found, before = [], 0.0
    for level in sorted(level_seconds):
        took = level_seconds[level]
        found.append(Window(level, started_s + before, started_s + before + took + slack))
        before += took
    return found


def end_of_events(exp: Experiment) -> float:
    """When the run stops on its own (`$ns halt`), else never: no event fires after it."""
    halts = [e.time_s for e in exp.events if e.object == "ns" and e.verb in ("halt", "terminate")]
    return min(halts, default=math.inf)


def link_events(exp: Experiment) -> list[tuple[float, str, str]]:
    """The file's events on links and LANs, before the run stops: (time, link, verb)."""
    links = {link.name for link in exp.all_links}
    end = end_of_events(exp)
    return [(e.time_s, e.object, e.verb) for e in exp.events
            if e.object in links and e.time_s <= end]  # fmt: skip


def traffic_paths(exp: Experiment, plan: Plan) -> dict[str, set[str]]:
    """For each traffic application, the links its packets (and a TCP's acknowledgements)
    cross: the routes between its agent's node and its peer's, both ways."""
    tables = {n.name: [(r.destination, r.via) for r in n.routes] for n in plan.nodes}
    forwarding = {n.name for n in plan.nodes if n.sysctls.get("net.ipv4.ip_forward") == "1"}
    found_routes = expect.routes(exp, tables, forwarding)
    routed = {(r.src, r.dst): {h.link for h in r.hops} for r in found_routes}
    shared: dict[tuple[str, str], set[str]] = {}
    for link in exp.all_links:
        for a in link.ports:
            for b in link.ports:
                shared.setdefault((a.node, b.node), set()).add(link.name)
    agents = {a.name: a for a in exp.agents}
    found = {}
    for app in exp.applications:
        agent = agents.get(app.agent)
        peer = agents.get(agent.peer) if agent and agent.peer else None
        if agent is None or peer is None:
            continue
        links: set[str] = set()
        for pair in ((agent.node, peer.node), (peer.node, agent.node)):
            links |= shared.get(pair) or routed.get(pair, set())
        found[app.name] = links
    return found


def traffic_during(exp: Experiment, running_at_start: Iterable[str], window: Window) -> set[str]:
    """Applications that send at some time in ``window``: running when the test began (the
    controller says so) and not stopped before the window, or started by the file within it."""
    names = {a.name for a in exp.applications}
    end = end_of_events(exp)
    on = {name: name in set(running_at_start) for name in names}
    sending = set()
    for e in sorted(exp.events, key=lambda e: e.time_s):
        if e.object not in names or e.verb not in ("start", "stop") or e.time_s > end:
            continue
        if e.time_s <= window.start_s:
            on[e.object] = e.verb == "start"
        elif e.time_s <= window.end_s and e.verb == "start":
            sending.add(e.object)
    return sending | {name for name, running in on.items() if running and window.start_s < end}


def counted_traffic(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> set[str]:
    """Links whose pipes forwarded packets between two readings of linkd's counters (the
    controller's ``link_counters``), taken while linktest sends nothing."""

    def pipe(row: dict[str, Any]) -> tuple[str, str, str]:
        return row["link"], row["port"], row["direction"]

    was = {pipe(r): r["packets_out"] for r in before}
    return {r["link"] for r in after if r["packets_out"] > was.get(pipe(r), r["packets_out"])}


def not_tested(
    exp: Experiment,
    plan: Plan,
    spans: list[Window],
    running_at_start: Iterable[str] = (),
    busy_links: Mapping[str, str] | None = None,
) -> dict[int, dict[str, str]]:
    """For each level, the links that cannot be tested then and why: a file's event on the
    link during the level; for levels 1, 3 and 4 also the experiment's traffic on the link,
    and ``busy_links`` (link -> what linkd's counters showed)."""
    events = link_events(exp)
    paths = traffic_paths(exp, plan)
    found: dict[int, dict[str, str]] = {}
    for w in spans:
        reasons: dict[str, str] = {}
        for time_s, link, verb in events:
            if w.start_s <= time_s <= w.end_s:
                reasons.setdefault(link, f"the experiment's event `{link} {verb}` at "
                                         f"{time_s:g} s fell during the test")  # fmt: skip
        if w.level in TRAFFIC_LEVELS:
            for app in sorted(traffic_during(exp, running_at_start, w)):
                for link in sorted(paths.get(app, ())):
                    reasons.setdefault(link, f"the experiment's traffic ({app}) shared the link")
            for link, why in (busy_links or {}).items():
                reasons.setdefault(link, why)
        if reasons:
            found[w.level] = reasons
    return found


def set_aside(report: Any, untested: Mapping[int, Mapping[str, str]]) -> list[str]:
    """Turns the checks of ``untested`` links at their levels into skips saying why (a
    ``linktest.run.Report``); the notes it added."""
    notes = []
    for c in report.checks:
        reasons = untested.get(c.level, {})
        why = next((reasons[link] for link in c.link.split() if link in reasons), None)
        if why is not None and c.verdict != "skip":
            c.verdict, c.reason = "skip", f"not tested: {why}"
    for level, reasons in sorted(untested.items()):
        for link, why in sorted(reasons.items()):
            notes.append(f"level {level}, {link}: not tested: {why}")
    report.notes.extend(notes)
    return notes
