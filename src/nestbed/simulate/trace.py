"""Streams an ns-2 trace into a run folder's tables: `links/counters.csv` every second,
`traffic/flows.csv` and `traffic/FLOW.csv`, and `tcp/FLOW.csv` (TCP sequence numbers).

Lines are read one at a time and aggregated per second; what is kept in memory is bounded by
the packets in flight (queues and wires), not by the length of the trace. The trace starts with
ns2.tcl's ``#nb`` lines, which name ns-2's nodes, links, LANs and agents in creation order;
they are matched to the IR's objects by creation order, endpoints and kind.

ns-2 trace line: ``EVENT TIME FROM TO TYPE SIZE FLAGS FID SRC.PORT DST.PORT SEQ UID`` where EVENT
is ``+`` enqueue, ``-`` dequeue, ``r`` received at TO, ``d`` drop, ``h`` hop (LANs), and ``o``
(nestbed's) drop by ordinal; ``v TIME link-down|link-up FROM TO`` marks link events.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nestbed.errors import InternalError
from nestbed.model import Agent, Experiment
from nestbed.results.folder import RunFolder
from nestbed.results.tables import FLOW_COLUMNS, FLOW_SERIES_COLUMNS, LINK_COLUMNS, Table
from nestbed.simulate.scope import members, planned_events

TCP_COLUMNS = ("t_s", "event", "seq")
_STALE_S = 60.0  # a packet unseen this long in a trace is forgotten (counted lost)
_STALE_CHECK = 1_000_000  # packets in flight before stale ones are looked for


@dataclass
class Direction:
    """One traced direction: a link's simplex link, or a LAN member's half."""

    link: str
    port: str
    direction: str
    lan: bool = False
    down: bool = False
    packets_in: int = 0
    bytes_in: int = 0
    packets_out: int = 0
    bytes_out: int = 0
    drops_loss: int = 0
    drops_queue: int = 0
    drops_other: int = 0
    queue_bytes: int = 0
    queued: dict[int, int] = field(default_factory=dict)  # uid -> size, waiting in the queue
    wire: dict[int, int] = field(default_factory=dict)  # uid -> size, dequeued, not yet arrived

    def unqueue(self, uid: int) -> bool:
        """Takes packet UID out of the queue; False when it was not in it."""
        size = self.queued.pop(uid, None)
        if size is None:
            return False
        self.queue_bytes -= size
        return True

    def row(self, t_s: float) -> dict[str, Any]:
        return {
            "t_s": round(t_s, 6),
            "link": self.link,
            "port": self.port,
            "direction": self.direction,
            "packets_in": self.packets_in,
            "bytes_in": self.bytes_in,
            "packets_out": self.packets_out,
            "bytes_out": self.bytes_out,
            "drops_loss": self.drops_loss,
            "drops_queue": self.drops_queue,
            "drops_other": self.drops_other,
            "queue_packets": len(self.queued),
            "queue_bytes": self.queue_bytes,
        }


@dataclass
class Flow:
    """One application's packets: those whose source is its agent."""

    name: str
    kind: str  # cbr, ftp
    source: str
    destination: str
    source_id: int  # ns-2 node ids
    destination_id: int
    header_bytes: int  # TCP/IP header ns-2 adds to each segment (0 for UDP)
    series: Table | None = None
    seq: Table | None = None
    packets_sent: int = 0
    bytes_sent: int = 0
    packets_received: int = 0
    bytes_received: int = 0
    retransmits: int = 0
    highest_sent: int = -1
    byte_seq: bool = False  # TCP sequence numbers count bytes (FullTcp), not segments
    next_expected: int = 0  # TCP: the sequence number the sink expects next
    out_of_order: dict[int, int] = field(default_factory=dict)  # seq -> the seq after it
    first_sent: float | None = None
    first_arrival: float | None = None
    last_arrival: float | None = None
    delays_us: Counter[int] = field(default_factory=Counter)
    in_flight: dict[int, float] = field(default_factory=dict)  # uid -> time sent
    # The second being accumulated, and the last one written (seconds in between had nothing).
    second: int | None = None
    written: int | None = None
    bin: dict[str, float] = field(default_factory=dict)

    # -- per packet -------------------------------------------------------------------------

    def control(self, size: int) -> bool:
        """A TCP segment without data (SYN, FIN, a FullTcp sender's pure ACK)."""
        return self.kind == "ftp" and size <= self.header_bytes

    def sent(self, t: float, uid: int, size: int, seq: int) -> None:
        if self.control(size):
            return
        self.in_flight[uid] = t
        if self.first_sent is None:
            self.first_sent = t
        self.packets_sent += 1
        if self.kind == "cbr":
            self.bytes_sent += size
            return
        if seq <= self.highest_sent:
            self.retransmits += 1
            self._add(t, "retransmits", 1)
        else:
            self.bytes_sent += size - self.header_bytes
            self.highest_sent = seq
        self._seq(t, "send", seq)

    def received(self, t: float, uid: int, size: int, seq: int) -> None:
        if self.control(size):
            return
        sent = self.in_flight.pop(uid, None)
        self.packets_received += 1
        if self.first_arrival is None:
            self.first_arrival = t
        self.last_arrival = t
        if self.kind == "cbr":
            self.bytes_received += size
            self._add(t, "packets", 1)
            self._add(t, "bytes", size)
            if sent is not None:
                delay_us = round((t - sent) * 1e6)
                self.delays_us[delay_us] += 1
                self._add(t, "delay_sum_us", delay_us)
                self._add(t, "delay_n", 1)
            return
        self._seq(t, "receive", seq)
        payload = size - self.header_bytes
        if seq < self.next_expected or seq in self.out_of_order:
            return  # a duplicate: goodput counts each segment once
        # What the sink has in order so far: one-way TCP numbers segments, FullTcp bytes.
        self.out_of_order[seq] = seq + (payload if self.byte_seq else 1)
        while self.next_expected in self.out_of_order:
            self.next_expected = self.out_of_order.pop(self.next_expected)
        self.bytes_received += payload
        self._add(t, "packets", 1)
        self._add(t, "bytes", payload)

    def dropped(self, t: float, uid: int, seq: int) -> None:
        if self.in_flight.pop(uid, None) is None:
            return  # a control segment, or forgotten
        if self.kind == "ftp":
            self._seq(t, "drop", seq)

    def acked(self, t: float, seq: int) -> None:
        # A one-way sink's ACK carries the cumulative ACK in its seq field; a FullTcp peer's
        # carries its own sequence number (ns-2 traces no ACK number by default).
        if not self.byte_seq:
            self._seq(t, "ack", seq)

    # -- per second -------------------------------------------------------------------------

    def _seq(self, t: float, event: str, seq: int) -> None:
        if self.seq is not None:
            self.seq.add({"t_s": t, "event": event, "seq": seq})

    def _add(self, t: float, what: str, amount: float) -> None:
        second = int(t)
        if second != self.second:
            self.flush()
            self.second = second
        self.bin[what] = self.bin.get(what, 0) + amount

    def flush(self) -> None:
        """Writes the second being accumulated (and empty seconds since the last one)."""
        if self.second is None or self.series is None:
            return
        if self.written is not None:
            for empty in range(self.written + 1, self.second):
                self.series.add(_series_row(self.kind, empty, {}))
        self.series.add(_series_row(self.kind, self.second, self.bin))
        self.written, self.second, self.bin = self.second, None, {}

    # -- the flow's row ---------------------------------------------------------------------

    def row(self, started: float | None, ended: float | None) -> dict[str, Any]:
        settled = self.packets_sent - len(self.in_flight)
        row: dict[str, Any] = {
            "flow": self.name,
            "kind": self.kind,
            "source": self.source,
            "destination": self.destination,
            "started_s": started,
            "ended_s": ended,
            "packets_sent": self.packets_sent,
            "bytes_sent": self.bytes_sent,
            "packets_received": self.packets_received,
            "bytes_received": self.bytes_received,
            # Packets still on their way when the simulation ended are neither lost nor not.
            "loss": 1 - self.packets_received / settled if settled > 0 else None,
            "outcome": "ok" if started is not None else "not started",
        }
        if self.kind == "cbr":
            # As the emulated run measures it: bytes over the span of arrivals.
            span = (self.last_arrival or 0) - (self.first_arrival or 0)
            row["throughput_bps"] = self.bytes_received * 8 / span if span > 0 else None
            row |= _delay_stats(self.delays_us)
        else:
            # As iperf3 does: bytes delivered over the time the transfer took.
            active = (self.last_arrival or 0) - (self.first_sent or 0)
            row["throughput_bps"] = self.bytes_received * 8 / active if active > 0 else None
            row["retransmits"] = self.retransmits
        return row


def _series_row(kind: str, second: int, b: dict[str, float]) -> dict[str, Any]:
    nbytes = int(b.get("bytes", 0))
    row: dict[str, Any] = {
        "t_s": second,
        "packets": int(b.get("packets", 0)),
        "bytes": nbytes,
        "throughput_bps": nbytes * 8,
    }
    if kind == "cbr":
        n = b.get("delay_n", 0)
        row["delay_mean_ms"] = b["delay_sum_us"] / n / 1e3 if n else None
    else:
        row["retransmits"] = int(b.get("retransmits", 0))
    return row


def _delay_stats(delays_us: Counter[int]) -> dict[str, float | None]:
    """Mean, median and 99th percentile (ms) of a histogram of delays in microseconds."""
    n = sum(delays_us.values())
    if not n:
        return {"delay_mean_ms": None, "delay_p50_ms": None, "delay_p99_ms": None}
    ordered = sorted(delays_us.items())
    mean = sum(d * c for d, c in ordered) / n

    def percentile(q: float) -> float:
        # The nearest rank at or above q, as an exact sample (no interpolation).
        rank, seen = max(1, math.ceil(q / 100 * n)), 0
        for d, c in ordered:
            seen += c
            if seen >= rank:
                return float(d)
        return float(ordered[-1][0])

    return {
        "delay_mean_ms": mean / 1e3,
        "delay_p50_ms": percentile(50) / 1e3,
        "delay_p99_ms": percentile(99) / 1e3,
    }


def _agent_kind(ns_class: str) -> str:
    if ns_class.startswith("Agent/TCPSink"):
        return "tcpsink"
    if ns_class.startswith("Agent/TCP"):
        return "tcp"
    return {"Agent/UDP": "udp", "Agent/Null": "null"}.get(ns_class, ns_class)


@dataclass
class Header:
    """What ns2.tcl said about ns-2's objects before the simulation began."""

    version: str = ""
    nodes: list[int] = field(default_factory=list)  # ns-2 id by creation index
    links: list[tuple[int, int]] = field(default_factory=list)  # creation indexes
    lans: list[tuple[int, list[int]]] = field(default_factory=list)  # LAN id, member indexes
    agents: list[tuple[int, str, str, int]] = field(default_factory=list)  # node, class, key, hdr


class Converter:
    """Turns the lines of one ns-2 trace into the run folder's tables, as they come."""

    def __init__(self, exp: Experiment, run: Path):
        self.exp, self.folder = exp, RunFolder(run)
        self.header = Header()
        self.started = False
        self.notes: list[str] = []
        self.skipped: Counter[str] = Counter()
        self.lines = 0
        self.end_s: float | None = None
        self.how: str | None = None  # halted, ended, exit, error; None: the trace broke off
        self.last_t = 0.0
        self.next_sample = 0.0
        self.directions: dict[tuple[int, int], Direction] = {}
        self.by_source: dict[str, Flow] = {}
        self.by_sink: dict[str, Flow] = {}
        self.flows: list[Flow] = []
        self.link_table: Table | None = None

    # -- input ------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.lines += 1
            if line.startswith("#nb "):
                self._meta(line.split())
            elif self.started:
                self._event(line)
            elif line.strip():
                self.skipped["trace line before the simulation started"] += 1

    def _meta(self, parts: list[str]) -> None:
        what, args = parts[1], parts[2:]
        h = self.header
        if what == "version":
            h.version = " ".join(args)
        elif what == "node":
            h.nodes.append(int(args[1]))
        elif what == "link":
            h.links.append((int(args[0]), int(args[1])))
        elif what == "lan":
            h.lans.append((int(args[0]), [int(a) for a in args[1:]]))
        elif what == "agent":
            h.agents.append((int(args[0]), args[1], args[2], int(args[3])))
        elif what == "note":
            self.notes.append(" ".join(args))
        elif what == "start":
            self._begin()
        elif what == "end":
            self.end_s, self.how = float(args[0]), args[1]

    def _event(self, line: str) -> None:
        p = line.split()
        if len(p) < 12:
            if p and p[0] == "v" and len(p) >= 5:
                self._link_state(p)
            else:
                self.skipped["line not in ns-2's trace format"] += 1
            return
        try:
            t = float(p[1])
            key = (int(p[2]), int(p[3]))
            size, seq, uid = int(p[5]), int(p[10]), int(p[11])
        except ValueError:
            self.skipped["line with a field that is not a number"] += 1
            return
        if t >= self.next_sample:
            self._sample_until(t)
        self.last_t = t
        event = p[0]
        d = self.directions.get(key)
        if d is None:
            self.skipped["event on a link nestbed does not know"] += 1
            lost = event in ("d", "o")
        else:
            lost = self._count(d, event, uid, size)
        flow = self.by_source.get(p[8])
        if flow is not None:
            if event == "r":
                if key[1] == flow.destination_id:
                    flow.received(t, uid, size, seq)
            else:
                if key[0] == flow.source_id and uid not in flow.in_flight:
                    flow.sent(t, uid, size, seq)  # its first hop (or a loss right there)
                if lost:
                    flow.dropped(t, uid, seq)
        elif event == "r":
            sink = self.by_sink.get(p[8])
            if sink is not None and key[1] == sink.source_id:
                sink.acked(t, seq)

    def _count(self, d: Direction, event: str, uid: int, size: int) -> bool:
        """Counts one event of direction D; True when it lost the packet."""
        if event == "+":
            d.packets_in += 1
            d.bytes_in += size
            d.queued[uid] = size
            d.queue_bytes += size
        elif event == "-":
            d.unqueue(uid)
            if d.lan:
                # A LAN member's half ends on the shared medium: dequeued is delivered.
                d.packets_out += 1
                d.bytes_out += size
            else:
                d.wire[uid] = size
        elif event == "r":
            d.wire.pop(uid, None)
            if d.lan:
                d.packets_in += 1
                d.bytes_in += size
            d.packets_out += 1
            d.bytes_out += size
        elif event == "d":
            if d.unqueue(uid):
                if d.down:
                    d.drops_other += 1
                else:
                    d.drops_queue += 1
            elif d.wire.pop(uid, None) is not None:
                d.drops_other += 1  # on the wire when the link went down
            elif d.lan:
                # ns-2's LAN hands every frame to every member; the others discard it.
                self.skipped["LAN frame discarded by a member it was not for"] += 1
                return False
            else:
                d.packets_in += 1
                d.bytes_in += size
                if d.down:
                    d.drops_other += 1
                else:
                    d.drops_loss += 1
            return True
        elif event == "o":
            d.packets_in += 1
            d.bytes_in += size
            d.drops_other += 1
            return True
        elif event != "h":
            self.skipped[f"unknown trace event '{event}'"] += 1
        return False

    def _link_state(self, p: list[str]) -> None:
        if p[2] not in ("link-down", "link-up"):
            self.skipped["v line other than link-up/link-down"] += 1
            return
        try:
            key = (int(p[3]), int(p[4]))
        except ValueError:
            self.skipped["line with a field that is not a number"] += 1
            return
        d = self.directions.get(key)
        if d is not None:
            d.down = p[2] == "link-down"

    # -- output -----------------------------------------------------------------------------

    def _begin(self) -> None:
        """Matches ns-2's objects to the IR's and opens the tables."""
        self.started = True
        names = self._node_names()
        self._map_links(names)
        self._map_lans(names)
        self._map_flows(names)
        self.link_table = Table(self.folder.link_counters, LINK_COLUMNS)

    def _node_names(self) -> dict[int, str]:
        ids = self.header.nodes
        if len(ids) != len(self.exp.nodes):
            raise InternalError(
                f"ns-2 made {len(ids)} nodes but nestbed's front end {len(self.exp.nodes)}; "
                "the file does not run the same way in both"
            )
        return {ns_id: node.name for ns_id, node in zip(ids, self.exp.nodes, strict=True)}

    def _map_links(self, names: dict[int, str]) -> None:
        ids = self.header.nodes
        unmatched = list(self.exp.links)
        for i, j in self.header.links:
            a, b = ids[i], ids[j]
            pair = {names[a], names[b]}
            link = next((x for x in unmatched if {p.node for p in x.ports} == pair), None)
            if link is None:
                self.notes.append(f"the link between {names[a]} and {names[b]} has no IR link")
                continue
            unmatched.remove(link)
            self.directions[(a, b)] = Direction(link.name, names[a], "egress")
            self.directions[(b, a)] = Direction(link.name, names[b], "egress")

    def _map_lans(self, names: dict[int, str]) -> None:
        ids = self.header.nodes
        for lan_id, member_indexes in self.header.lans:
            member_ids = [ids[i] for i in member_indexes]
            wanted = {names[m] for m in member_ids}
            lan = next((x for x in self.exp.lans if {p.node for p in x.ports} == wanted), None)
            if lan is None:
                self.notes.append(f"an ns-2 LAN of {', '.join(sorted(wanted))} has no IR LAN")
                continue
            for m in member_ids:
                self.directions[(m, lan_id)] = Direction(lan.name, names[m], "egress", lan=True)
                self.directions[(lan_id, m)] = Direction(lan.name, names[m], "ingress", lan=True)

    def _map_flows(self, names: dict[int, str]) -> None:
        ids = self.header.nodes
        # IR agents by (node, kind) in creation order, as ns-2's agents are reported.
        waiting: dict[tuple[str, str], list[Agent]] = {}
        for agent in self.exp.agents:
            waiting.setdefault((agent.node, agent.kind), []).append(agent)
        found: dict[str, tuple[int, str, int]] = {}  # IR agent -> ns node id, key, header
        classes: dict[str, str] = {}  # IR agent -> ns-2 class
        for node_index, ns_class, key, header in self.header.agents:
            node = names[ids[node_index]]
            queue = waiting.get((node, _agent_kind(ns_class)))
            if queue:
                agent = queue.pop(0).name
                found[agent], classes[agent] = (ids[node_index], key, header), ns_class
        agents = {a.name: a for a in self.exp.agents}
        for app in self.exp.applications:
            agent = agents[app.agent]
            if agent.peer is None or app.agent not in found or agent.peer not in found:
                self.notes.append(f"{app.kind} {app.name} has no connected agents in ns-2")
                continue
            (src_id, src_key, header), (dst_id, dst_key, _) = found[app.agent], found[agent.peer]
            flow = Flow(
                app.name,
                app.kind,
                names[src_id],
                names[dst_id],
                src_id,
                dst_id,
                header if app.kind == "ftp" else 0,
                byte_seq="FullTcp" in classes[app.agent],
                series=Table(self.folder.flow(app.name), FLOW_SERIES_COLUMNS),
                seq=(
                    Table(self.folder.tcp_flow(app.name), TCP_COLUMNS)
                    if app.kind == "ftp"
                    else None
                ),
            )
            if src_key in self.by_source:
                self.notes.append(
                    f"{app.name} shares agent {app.agent} with {self.by_source[src_key].name}; "
                    "its packets are counted there"
                )
                continue
            self.flows.append(flow)
            self.by_source[src_key] = flow
            self.by_sink[dst_key] = flow

    def _sample_until(self, t: float) -> None:
        """Writes the link counters of every whole second up to T (cumulative, like linkd's)."""
        while self.next_sample <= t:
            self._sample(self.next_sample)
            self.next_sample += 1.0
        self._forget_stale(t)

    def _sample(self, t: float) -> None:
        if self.link_table is None:
            return
        for _key, d in sorted(
            self.directions.items(), key=lambda kv: (kv[1].link, kv[1].port, kv[1].direction)
        ):
            self.link_table.add(d.row(t))

    def _forget_stale(self, t: float) -> None:
        """Packets ns-2 lost without a trace line (no route) would be kept forever."""
        for flow in self.flows:
            if len(flow.in_flight) > _STALE_CHECK:
                before = len(flow.in_flight)
                flow.in_flight = {u: s for u, s in flow.in_flight.items() if t - s < _STALE_S}
                self.skipped["packets forgotten after a minute unseen"] += before - len(
                    flow.in_flight
                )

    def finish(self) -> list[dict[str, Any]]:
        """Closes the tables (the last sample at the end of the simulation) and writes
        traffic/flows.csv; returns its rows."""
        end_s = self.end_s if self.end_s is not None else self.last_t
        self.end_s = end_s
        if self.started:
            self._sample_until(end_s)
            if self.next_sample - 1.0 < end_s:
                self._sample(end_s)
        if self.link_table is not None:
            self.link_table.close()
        times = _flow_times(self.exp, end_s)
        rows = []
        for flow in self.flows:
            flow.flush()
            for table in (flow.series, flow.seq):
                if table is not None:
                    table.close()
            rows.append(flow.row(*times.get(flow.name, (None, None))))
        table = Table(self.folder.flows, FLOW_COLUMNS)
        for row in rows:
            table.add(row)
        table.close()
        return rows


def _flow_times(exp: Experiment, end_s: float) -> dict[str, tuple[float | None, float | None]]:
    """When each application started (first start) and ended (last stop, or the end of the
    simulation when it was still running), from the events that happened."""
    apps = {a.name for a in exp.applications}
    times: dict[str, tuple[float | None, float | None]] = {}
    running: dict[str, bool] = {}
    for p in planned_events(exp):
        if p.time_s > end_s:
            break
        for name in members(exp, p.object):
            if name not in apps:
                continue
            started, ended = times.get(name, (None, None))
            if p.verb in ("start", "produce", "send"):
                times[name] = (p.time_s if started is None else started, ended)
                running[name] = True
            elif p.verb == "stop" and running.get(name):
                times[name] = (started, p.time_s)
                running[name] = False
    for name, on in running.items():
        if on:
            times[name] = (times[name][0], end_s)
    return times
