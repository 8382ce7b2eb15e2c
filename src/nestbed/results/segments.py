"""An emulated run's TCP flows segment by segment, from its captures: the sender's segments and
the ACKs it got back, arrivals at the receiver, and the segments the network lost.

Written as ``tcp/FLOW.csv``, the table a simulated run has, so the same plot and the same
recovery analysis read both (``results.seqplot``).
"""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dpkt

from nestbed.results.tables import write_table

COLUMNS = ["t_s", "event", "seq", "bytes", "session"]
_SEQ_SPACE = 1 << 32


@dataclass(frozen=True)
class Packet:
    """One TCP/IPv4 or TCP/IPv6 packet of a capture."""

    t: float  # capture time, Unix seconds
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    payload: int
    flags: int

    @property
    def syn(self) -> bool:
        return bool(self.flags & dpkt.tcp.TH_SYN)

    @property
    def acks(self) -> bool:
        return bool(self.flags & dpkt.tcp.TH_ACK)


def _network_layer(datalink: int, frame: bytes) -> object | None:
    if datalink == dpkt.pcap.DLT_EN10MB:
        return dpkt.ethernet.Ethernet(frame).data
    if datalink == dpkt.pcap.DLT_LINUX_SLL:
        return dpkt.sll.SLL(frame).data
    if datalink == dpkt.pcap.DLT_LINUX_SLL2:
        return dpkt.sll2.SLL2(frame).data
    if datalink in (dpkt.pcap.DLT_RAW, 101):  # 101: LINKTYPE_RAW in pcap headers
        return (dpkt.ip6.IP6 if frame[:1] and frame[0] >> 4 == 6 else dpkt.ip.IP)(frame)
    return None


def read_tcp(pcap: Path) -> Iterator[Packet]:
    """The TCP packets of a pcap or pcapng file; anything else in it is skipped.

    A capture cut short (the capturing process stopped mid-write) ends at its last packet
    with whole headers.
    """
    with pcap.open("rb") as f:
        try:
            reader = dpkt.pcap.UniversalReader(f)
        except (ValueError, dpkt.dpkt.Error):
            return
        datalink = reader.datalink()
        try:
            for t, frame in reader:
                try:
                    ip = _network_layer(datalink, frame)
                except (dpkt.dpkt.Error, IndexError, ValueError):
                    continue
                # The payload's length from the headers: a capture with a short snaplen, or
                # cut mid-packet, still has them.
                if isinstance(ip, dpkt.ip.IP):
                    family, tcp, carried = socket.AF_INET, ip.data, ip.len - ip.hl * 4
                elif isinstance(ip, dpkt.ip6.IP6):
                    family, tcp, carried = socket.AF_INET6, ip.data, ip.plen
                else:
                    continue
                if not isinstance(tcp, dpkt.tcp.TCP):
                    continue
                yield Packet(
                    float(t),
                    socket.inet_ntop(family, ip.src),
                    tcp.sport,
                    socket.inet_ntop(family, ip.dst),
                    tcp.dport,
                    tcp.seq,
                    tcp.ack,
                    max(carried - tcp.off * 4, 0),
                    tcp.flags,
                )
        except (dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError, ValueError):
            return  # truncated at the end


@dataclass(frozen=True)
class Connection:
    """One direction of a TCP connection: (source address, source port) to (address, port)."""

    src: str
    sport: int
    dst: str
    dport: int

    def carries(self, p: Packet) -> bool:
        return (p.src, p.sport, p.dst, p.dport) == (self.src, self.sport, self.dst, self.dport)

    def acked_by(self, p: Packet) -> bool:
        return (p.src, p.sport, p.dst, p.dport) == (self.dst, self.dport, self.src, self.sport)


def bulk_connection(
    packets: Iterable[Packet], sources: set[str], dst: str, dport: int
) -> Connection | None:
    """The connection from any of SOURCES to DST:DPORT that carried the most payload (a tool
    such as iperf3 also opens a control connection to the same port)."""
    carried: dict[Connection, int] = defaultdict(int)
    for p in packets:
        if p.src in sources and p.dst == dst and p.dport == dport:
            carried[Connection(p.src, p.sport, p.dst, p.dport)] += p.payload
    best = max(carried.items(), key=lambda item: item[1], default=None)
    return best[0] if best and best[1] > 0 else None


def segment_rows(
    sent: list[Packet], arrived: list[Packet] | None, c: Connection, t0: float, session: int
) -> list[dict[str, object]]:
    """The table's rows for connection C: ``send`` of every data segment and ``ack`` of every
    ACK the sender got (both from the sender's capture, SENT), ``receive`` of every segment
    at the receiver (ARRIVED, its capture; None without one), and ``drop`` of every
    transmission that never arrived, at the time it was sent.

    Sequence numbers are bytes from the connection's first data byte (0); an ACK's is the next
    byte it expects. An arrival is matched to the latest transmission of the same segment
    before it; transmissions that may still have been on their way when the receiver's
    capture ended are not counted as drops.
    """
    data = [p for p in sent if c.carries(p)]
    syn = next((p for p in data if p.syn), None)
    isn = (syn.seq + 1) if syn else min((p.seq for p in data if p.payload), default=0)

    def rel(seq: int) -> int:
        return (seq - isn) % _SEQ_SPACE

    rows: list[dict[str, object]] = []
    sends = [p for p in data if p.payload]
    for p in sends:
        rows.append({"t_s": p.t - t0, "event": "send", "seq": rel(p.seq), "bytes": p.payload})
    for p in sent:
        if c.acked_by(p) and p.acks and not p.syn:
            rows.append({"t_s": p.t - t0, "event": "ack", "seq": rel(p.ack), "bytes": 0})
    if arrived is not None:
        arrivals = [p for p in arrived if c.carries(p) and p.payload]
        for p in arrivals:
            rows.append({"t_s": p.t - t0, "event": "receive", "seq": rel(p.seq),
                         "bytes": p.payload})  # fmt: skip
        rows += [{"t_s": p.t - t0, "event": "drop", "seq": rel(p.seq), "bytes": p.payload}
                 for p in _lost(sends, arrivals)]  # fmt: skip
    for row in rows:
        row["session"] = session
    rows.sort(key=lambda row: (row["t_s"], row["event"]))
    return rows


def _lost(sends: list[Packet], arrivals: list[Packet]) -> list[Packet]:
    if not arrivals:
        return []
    if max(p.payload for p in arrivals) > max(p.payload for p in sends):
        return []  # the receiver's segments were merged (GRO): arrivals do not match sends
    waiting: dict[tuple[int, int], list[Packet]] = defaultdict(list)
    pending = sorted(sends, key=lambda p: p.t)
    i, transit = 0, 0.0
    for a in sorted(arrivals, key=lambda p: p.t):
        while i < len(pending) and pending[i].t <= a.t:
            waiting[(pending[i].seq, pending[i].payload)].append(pending[i])
            i += 1
        queue = waiting.get((a.seq, a.payload))
        if queue:
            # The latest transmission before it: earlier ones were resent because they were lost.
            transit = max(transit, a.t - queue.pop().t)
    # What was sent less than the longest transit time before the receiver's capture ended
    # may have been on its way, not lost.
    horizon = max(p.t for p in arrivals) - transit
    return sorted((p for queue in waiting.values() for p in queue if p.t < horizon),
                  key=lambda p: p.t)  # fmt: skip


def write_tcp_table(
    path: Path,
    sender_pcaps: list[Path],
    receiver_pcaps: list[Path],
    sources: set[str],
    sessions: list[tuple[str, int]],
    t0: float,
) -> bool:
    """Writes PATH for one flow: each session's bulk connection to (address, port) in
    SESSIONS, as captured at the sender (SENDER_PCAPS, any of its interfaces) and at the
    receiver. False, and nothing written, when the captures hold none of its segments."""
    sent = [p for pcap in sender_pcaps for p in read_tcp(pcap)]
    arrived = [p for pcap in receiver_pcaps for p in read_tcp(pcap)] if receiver_pcaps else None
    rows: list[dict[str, object]] = []
    for k, (dst, port) in enumerate(sessions):
        c = bulk_connection(sent, sources, dst, port)
        if c is not None:
            rows += segment_rows(sent, arrived, c, t0, k)
    if not rows:
        return False
    write_table(path, COLUMNS, rows)
    return True
