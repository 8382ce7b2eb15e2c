"""The end of a run: the flows' tables from their raw output (traffic/), the TCP segment
tables from the captures (tcp/), then the manifest's end and, in a process of its own, the
report."""

from __future__ import annotations

import time
from collections.abc import Iterable

from nestbed.control.captures import Captures
from nestbed.control.traffic import Flow
from nestbed.model import Experiment
from nestbed.results import manifest
from nestbed.results.drawing import draw_detached, note_off
from nestbed.results.folder import RunFolder
from nestbed.results.tables import FLOW_COLUMNS, FLOW_SERIES_COLUMNS, write_table

_DRAIN_S = 0.5  # after the last sender stops, time for packets in flight to arrive


def collect_traffic(flows: Iterable[Flow], folder: RunFolder, t0: float) -> list[str]:
    """Stops every flow and writes traffic/flows.csv and traffic/FLOW.csv; the problems met
    (one sentence each). ``t0`` is the run's start on the monotonic clock."""
    flows = list(flows)
    for flow in flows:
        flow.stop_senders()
    if any(flow.sessions and flow.sessions[-1].sender for flow in flows):
        time.sleep(_DRAIN_S)
    problems, rows = [], []
    for flow in flows:
        flow.stop_receivers()
        try:
            row, series = flow.results(int(t0 * 1e9))
        except Exception as exc:  # one flow's unreadable output must not lose the others'
            problems.append(f"traffic of {flow.name} could not be read: {exc}")
            continue
        rows.append(row)
        write_table(folder.flow(flow.name), FLOW_SERIES_COLUMNS, series)
    write_table(folder.flows, FLOW_COLUMNS, rows)
    return problems


def tcp_tables(
    flows: Iterable[Flow], captures: Captures, exp: Experiment, folder: RunFolder, t0_unix: float
) -> list[str]:
    """tcp/FLOW.csv of every FTP flow that sent, from the captures at its two ends; the
    problems met."""
    from nestbed.results.segments import write_tcp_table

    problems = []
    for flow in flows:
        if flow.kind != "ftp" or not any(s.sender for s in flow.sessions):
            continue
        try:
            write_tcp_table(
                folder.tcp_flow(flow.name),
                captures.of_node(flow.source),
                captures.of_node(flow.destination),
                set(exp.addresses().get(flow.source, [])),
                [(flow.address, s.port) for s in flow.sessions if s.sender],
                t0_unix,
            )
        except (OSError, ValueError) as exc:
            problems.append(f"the TCP segments of {flow.name} could not be read: {exc}")
    return problems


def close_run(
    folder: RunFolder, outcome: str, reason: str | None, duration_s: float, *, report: bool
) -> str | None:
    """Ends the manifest, then (with ``report``) starts drawing the report in a process of its
    own, so the run's end waits for its tables only (the manifest says which; `nestbed report
    RUN` draws it again); the run's reason."""
    manifest.end(folder.root, outcome, reason, duration_s)
    if not report:
        note_off(folder.root)
        return reason
    try:
        draw_detached(folder.root)
    except OSError as exc:  # the run's results stand without their report
        return (
            f"{reason}; the report was not drawn: {exc}"
            if reason
            else (f"the report was not drawn: {exc}")
        )
    return reason
