"""What a simulation covers: the file's events with the times they took in ns-2, and everything
nestbed would emulate that ns-2 does not simulate, each named (never silently dropped)."""

from __future__ import annotations

from dataclasses import dataclass

from nestbed.model import Experiment, Link, Shaping
from nestbed.units import format_delay


@dataclass(frozen=True)
class Planned:
    """An event as it happens in the simulation: static, or from a timeline or sequence."""

    time_s: float
    source: str  # static, timeline, sequence
    object: str
    verb: str
    args: tuple[str, ...]


def planned_events(exp: Experiment) -> list[Planned]:
    """The file's events in time order, timelines and sequences expanded where they start (in
    ns-2 a sequence's steps take no time)."""
    timelines = {t.name: t for t in exp.timelines}
    sequences = {s.name: s for s in exp.sequences}
    out: list[Planned] = []

    def expand(time_s: float, source: str, obj: str, verb: str, args: tuple[str, ...]) -> None:
        out.append(Planned(time_s, source, obj, verb, args))
        if obj in timelines and verb in ("start", "run"):
            for e in timelines[obj].events:
                expand(time_s + e.time_s, "timeline", e.object, e.verb, e.args)
        elif obj in sequences and verb in ("start", "run"):
            for step in sequences[obj].steps:
                expand(time_s, "sequence", step.object, step.verb, step.args)

    for e in exp.events:
        expand(e.time_s, "static", e.object, e.verb, e.args)
    return sorted(out, key=lambda p: p.time_s)  # stable: ties keep file order


def members(exp: Experiment, obj: str) -> tuple[str, ...]:
    """The objects an event on OBJ reaches: a group's members (recursively), or OBJ."""
    for g in exp.groups:
        if g.name == obj:
            return tuple(m for member in g.members for m in members(exp, member))
    return (obj,)


def event_outcome(exp: Experiment, p: Planned, end_s: float) -> tuple[str, str]:
    """(outcome, message) of an event in the simulation."""
    if p.time_s > end_s:
        return "skipped", "the simulation ended before this event"
    programs = {x.name for x in exp.programs}
    lans = {x.name for x in exp.lans}
    reached = members(exp, p.object)
    if any(m in programs for m in reached):
        return "not simulated", "programs cannot run in a simulator"
    if any(m in lans for m in reached):
        # ns-2's LanNode has no such methods; the stub's stand-ins do nothing.
        return "not simulated", f"ns-2's LAN model has no `{p.verb}` event"
    if p.object == "ns" and p.verb == "linktest":
        return "not simulated", "linktest checks a live network"
    return "ok", ""


def event_rows(exp: Experiment, end_s: float) -> list[dict[str, object]]:
    """events.csv of a simulated run: every event happens exactly at its planned time."""
    rows = []
    for i, p in enumerate(planned_events(exp)):
        outcome, message = event_outcome(exp, p, end_s)
        done = outcome != "skipped"
        rows.append(
            {
                "index": i,
                "source": p.source,
                "planned_s": p.time_s,
                "actual_s": p.time_s if done else None,
                "error_ms": 0.0 if done else None,
                "object": p.object,
                "verb": p.verb,
                "args": " ".join(p.args),
                "outcome": outcome,
                "message": message,
            }
        )
    return rows


def program_rows(exp: Experiment) -> list[dict[str, object]]:
    """programs.csv of a simulated run: every program, none of them run."""
    rows = [
        {"program": p.name, "node": p.node, "command": p.command, "outcome": "not simulated"}
        for p in exp.programs
    ]
    rows += [
        {"program": f"startcmd-{n.name}", "node": n.name, "command": n.startcmd,
         "outcome": "not simulated"}
        for n in exp.nodes if n.startcmd
    ]  # fmt: skip
    return rows


def _shaping_gaps(s: Shaping) -> list[str]:
    """What ns-2's links (constant delay, Bernoulli or ordinal loss) leave out of a direction."""
    gaps = []
    if s.jitter_s:
        gaps.append(f"jitter {format_delay(s.jitter_s)} ({s.jitter_distribution})")
    if s.reorder:
        gaps.append("reordering")
    if s.gilbert_elliott is not None:
        gaps.append("Gilbert-Elliott loss")
    if s.duplicate:
        gaps.append(f"duplication {s.duplicate:g}")
    if s.corrupt:
        gaps.append(f"corruption {s.corrupt:g}")
    return gaps


def _link_gaps(link: Link) -> list[str]:
    out = []
    for port in link.ports:
        for direction in ("egress", "ingress"):
            gaps = _shaping_gaps(getattr(port, direction))
            if gaps:
                out.append(f"{link.kind} {link.name}, {port.node} {direction}: {', '.join(gaps)}")
    return out


def not_simulated(exp: Experiment) -> list[str]:
    """Everything nestbed would emulate or run that the ns-2 simulation leaves out, one line
    each, in the order of the file's objects."""
    out = []
    for n in exp.nodes:
        settings = [
            f"{what} {value}"
            for what, value in (
                ("os", n.os),
                ("hardware type", n.hardware_type),
                ("CPU cores", n.cpu_cores),
                ("CPU pinning", " ".join(map(str, n.cpu_pin)) or None),
                ("memory bytes", n.memory_bytes),
                ("sysctls", " ".join(f"{k}={v}" for k, v in n.sysctls.items()) or None),
                ("fixed host", n.fixed_host),
            )
            if value is not None
        ]
        if settings:
            out.append(f"node {n.name}: {', '.join(settings)} (an ns-2 node is not a machine)")
        if n.startcmd:
            out.append(f"node {n.name}: startcmd `{n.startcmd}` (programs cannot run in ns-2)")
    for p in exp.programs:
        out.append(f"program {p.name} on {p.node}: `{p.command}` (programs cannot run in ns-2)")
    if exp.routing == "manual":
        out.append("routing Manual: ns-2 computes its own routes; the file's add-route entries "
                   "are not used")  # fmt: skip
    for link in exp.links:
        out += _link_gaps(link)
    for lan in exp.lans:
        out.append(
            f"LAN {lan.name}: simulated with ns-2's shared-medium LAN (one bandwidth and delay "
            "for all members), not nestbed's switch with a pipe per member; per-member "
            "settings, LAN loss and queues are not simulated"
        )
        out += _link_gaps(lan)
    for i in exp.inert:
        out.append(f"{i.command} {' '.join(i.args)} (a testbed command with no effect)".strip())
    seen = set()
    for p in planned_events(exp):
        outcome, message = event_outcome(exp, p, float("inf"))
        key = (p.object, p.verb)
        if outcome == "not simulated" and key not in seen:
            seen.add(key)
            out.append(f"event {p.object} {p.verb}: {message}")
    return out
