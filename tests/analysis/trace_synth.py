"""Synthetic captures for the analysis tests, built with `struct` only.

`simulate` runs one TCP transfer through a tiny event-driven model (a sender with a fixed or
NewReno window, a path with a round-trip time, random loss and an optional bottleneck, a
receiver that acknowledges every segment) and returns the segments as a capture taken at the
sender sees them. Sender stalls model a descheduled sender: between an ACK's arrival and the
next send, nothing is sent while a stall lasts; the network is untouched. `write_pcap` and
`write_pcapng` write them behind Ethernet, Linux cooked v1/v2 or raw IP, over IPv4 or IPv6.
"""

from __future__ import annotations

import heapq
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

SYN, FIN, ACK = 0x02, 0x01, 0x10
START_S = 1_700_000_000.0
LINKTYPES = {"ethernet": 1, "sll": 113, "sll2": 276, "raw": 101}
SENDER, RECEIVER = ("10.0.0.1", 40000), ("10.0.0.2", 5001)
SENDER6, RECEIVER6 = ("2001:db8::1", 40000), ("2001:db8::2", 5001)
ISN_S, ISN_R = 1_000_000, 5_000


@dataclass(frozen=True, slots=True)
class Seg:
    """A captured TCP segment: time (s since START_S), direction and header fields."""

    t: float
    from_sender: bool
    seq: int
    ack: int
    flags: int
    window: int
    length: int
    wscale: int | None = None


@dataclass(kw_only=True)
class Scenario:
    size_bytes: int = 2_000_000
    mss: int = 1448
    rwnd: int = 65536
    wscale: int = 2
    rtt_s: float = 0.020
    loss: float = 0.0
    rate_bps: float | None = None  # bottleneck on the data path; None: none
    queue_packets: int = 1000
    reno: bool = False  # False: the window is the receiver's (the paper's fixed windows)
    stalls: tuple[float, float, float] | None = None  # mean gap, min and max stall, s
    react_s: float = 10e-6
    seed: int = 1
    segs: list[Seg] = field(default_factory=list)


def _stall_windows(sc: Scenario, horizon: float) -> list[tuple[float, float]]:
    if sc.stalls is None:
        return []
    rng = random.Random(sc.seed + 1)
    gap, low, high = sc.stalls
    windows, t = [], 0.0
    while t < horizon:
        t += rng.expovariate(1 / gap)
        d = rng.uniform(low, high)
        windows.append((t, t + d))
        t += d
    return windows


def simulate(sc: Scenario) -> list[Seg]:
    """The transfer's segments in capture order (the capture is at the sender)."""
    rng = random.Random(sc.seed)
    stalls = _stall_windows(sc, 1000.0)
    half = sc.rtt_s / 2
    out: list[Seg] = []
    events: list[tuple[float, int, str, int]] = []
    n = 0

    def push(t: float, kind: str, value: int = 0) -> None:
        nonlocal n
        n += 1
        heapq.heappush(events, (t, n, kind, value))

    def awake(t: float) -> float:
        for start, end in stalls:
            if start <= t < end:
                return end
            if start > t:
                break
        return t

    win_field = min(sc.rwnd >> sc.wscale, 65535)
    out.append(Seg(0.0, True, ISN_S, 0, SYN, 65535, 0, sc.wscale))
    out.append(Seg(sc.rtt_s, False, ISN_R, ISN_S + 1, SYN | ACK, 65535, 0, sc.wscale))
    t0 = sc.rtt_s + sc.react_s
    out.append(Seg(t0, True, ISN_S + 1, ISN_R + 1, ACK, 1000, 0))
    una = nxt = high = 0  # relative to ISN_S + 1
    cwnd = sc.rwnd if not sc.reno else 10 * sc.mss
    ssthresh = 1 << 30
    dupacks, recover, in_recovery = 0, 0, False
    link_free, queue_out = 0.0, []  # bottleneck: when free, departure times queued
    rcv_nxt, buffered = 0, {}
    rto_token, fin_sent, last_send = 0, False, 0.0

    def rto() -> float:
        return 0.2 + sc.rtt_s

    def transmit(t: float, seq: int, length: int) -> float:
        """Sends one data segment at t (captured), returns the time the next may go."""
        nonlocal link_free, last_send
        t = max(t, last_send + 1e-6)
        last_send = t
        out.append(Seg(t, True, ISN_S + 1 + seq, ISN_R + 1, ACK, 1000, length))
        arrive = t + half
        if sc.rate_bps is not None:
            while queue_out and queue_out[0] <= t:
                queue_out.pop(0)
            if len(queue_out) >= sc.queue_packets:
                return t  # tail drop at the bottleneck
            link_free = max(t, link_free) + (length + 52) * 8 / sc.rate_bps
            queue_out.append(link_free)
            arrive = link_free + half
        if rng.random() >= sc.loss:
            push(arrive, "data", seq * 100_000 + length)
        return t

    def send(t: float) -> None:
        nonlocal nxt, high, fin_sent, rto_token
        limit = min(cwnd, sc.rwnd)
        while nxt < sc.size_bytes and nxt + min(sc.mss, sc.size_bytes - nxt) - una <= limit:
            length = min(sc.mss, sc.size_bytes - nxt)
            t = transmit(t, nxt, length)
            nxt += length
            high = max(high, nxt)
        if nxt >= sc.size_bytes and una >= sc.size_bytes and not fin_sent:
            fin_sent = True
            out.append(Seg(max(t, last_send + 1e-6), True, ISN_S + 1 + nxt, ISN_R + 1, FIN | ACK,
                           1000, 0))  # fmt: skip
            push(t + sc.rtt_s, "finack", 0)
        if una < nxt:
            rto_token += 1
            push(t + rto(), "rto", rto_token)

    send(t0)
    while events:
        t, _, kind, value = heapq.heappop(events)
        if kind == "data":  # at the receiver
            seq, length = divmod(value, 100_000)
            if seq == rcv_nxt:
                rcv_nxt += length
                while rcv_nxt in buffered:
                    rcv_nxt += buffered.pop(rcv_nxt)
            elif seq > rcv_nxt:
                buffered[seq] = length
            push(t + half, "ack", rcv_nxt)
        elif kind == "ack":  # at the sender: captured on arrival
            out.append(Seg(t, False, ISN_R + 1, ISN_S + 1 + value, ACK, win_field, 0))
            if value > una:
                acked, una = value - una, value
                dupacks = 0
                if in_recovery and una < recover:  # NewReno partial ACK
                    transmit(awake(t + sc.react_s), una, min(sc.mss, sc.size_bytes - una))
                else:
                    if in_recovery:
                        cwnd, in_recovery = ssthresh, False
                    elif sc.reno:
                        cwnd += acked if cwnd < ssthresh else max(sc.mss * acked // cwnd, 1)
                nxt = max(nxt, una)
                send(awake(t + sc.react_s))
            elif value == una and una < nxt:
                dupacks += 1
                if dupacks == 3 and not in_recovery:
                    ssthresh = max((nxt - una) // 2, 2 * sc.mss)
                    if sc.reno:
                        cwnd = ssthresh
                    in_recovery, recover = True, nxt
                    transmit(awake(t + sc.react_s), una, min(sc.mss, sc.size_bytes - una))
        elif kind == "rto" and value == rto_token and una < sc.size_bytes:
            ssthresh = max((nxt - una) // 2, 2 * sc.mss)
            if sc.reno:
                cwnd = sc.mss
            nxt, in_recovery, dupacks = una, False, 0
            send(awake(t))
        elif kind == "finack":
            end = ISN_S + 2 + sc.size_bytes
            out.append(Seg(t, False, ISN_R + 1, end, FIN | ACK, win_field, 0))
            out.append(Seg(t + sc.react_s, True, end, ISN_R + 2, ACK, 1000, 0))
    return sorted(out, key=lambda s: s.t)


# ---- bytes -------------------------------------------------------------------------------


def _ip6(text: str) -> bytes:
    import ipaddress

    return ipaddress.ip_address(text).packed


def tcp_bytes(seg: Seg, *, v6: bool = False) -> bytes:
    """The IP packet of ``seg`` (checksums left zero: the analyzer does not check them)."""
    (s_ip, s_port), (d_ip, d_port) = (SENDER6, RECEIVER6) if v6 else (SENDER, RECEIVER)
    if not seg.from_sender:
        (s_ip, s_port), (d_ip, d_port) = (d_ip, d_port), (s_ip, s_port)
    options = b"" if seg.wscale is None else struct.pack("!BBBB", 3, 3, seg.wscale, 1)
    offset = (20 + len(options)) // 4
    tcp = struct.pack("!HHIIBBHHH", s_port, d_port, seg.seq & 0xFFFFFFFF, seg.ack & 0xFFFFFFFF,
                      offset << 4, seg.flags, seg.window, 0, 0) + options  # fmt: skip
    payload = b"\x00" * seg.length
    if v6:
        header = struct.pack("!IHBB", 6 << 28, len(tcp) + len(payload), 6, 64)
        return header + _ip6(s_ip) + _ip6(d_ip) + tcp + payload
    total = 20 + len(tcp) + len(payload)
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0,
                         bytes(map(int, s_ip.split("."))), bytes(map(int, d_ip.split("."))))  # fmt: skip
    return header + tcp + payload


def frame(link: str, ip: bytes) -> bytes:
    """``ip`` behind the link-layer header of ``link`` (ethernet, sll, sll2, raw)."""
    ethertype = b"\x86\xdd" if ip[0] >> 4 == 6 else b"\x08\x00"
    if link == "ethernet":
        return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01" + ethertype + ip
    if link == "sll":
        return struct.pack("!HHH8s", 4, 1, 6, b"\x02\x00\x00\x00\x00\x01") + ethertype + ip
    if link == "sll2":
        return ethertype + struct.pack("!HIHBB8s", 0, 3, 1, 4, 6, b"\x02\x00\x00\x00\x00\x01") + ip
    if link == "raw":
        return ip
    raise ValueError(link)


def records(
    segs: list[Seg], *, link: str = "ethernet", v6: bool = False
) -> list[tuple[float, bytes]]:
    return [(START_S + s.t, frame(link, tcp_bytes(s, v6=v6))) for s in segs]


def write_pcap(path: Path, recs: list[tuple[float, bytes]], *, link: str = "ethernet",
               snaplen: int = 65535, nanos: bool = False) -> Path:  # fmt: skip
    """A little-endian pcap; records longer than ``snaplen`` are cut as tcpdump -s cuts them."""
    parts = [struct.pack("<IHHiIII", 0xA1B23C4D if nanos else 0xA1B2C3D4, 2, 4, 0, 0, snaplen,
                         LINKTYPES[link])]  # fmt: skip
    scale = 1_000_000_000 if nanos else 1_000_000
    for t, data in recs:
        units = round(t * scale)
        cut = data[:snaplen]
        parts.append(struct.pack("<IIII", units // scale, units % scale, len(cut), len(data)))
        parts.append(cut)
    path.write_bytes(b"".join(parts))
    return path


def _block(kind: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def write_pcapng(path: Path, recs: list[tuple[float, bytes]], *, link: str = "ethernet",
                 snaplen: int = 65535, tsresol: int = 9) -> Path:  # fmt: skip
    """A little-endian pcapng with one interface stamping in 10^-tsresol s."""
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    options = struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<HH", 0, 0)
    idb = _block(1, struct.pack("<HHI", LINKTYPES[link], 0, snaplen) + options)
    parts = [shb, idb]
    for t, data in recs:
        units = round(t * 10**tsresol)
        cut = data[:snaplen]
        epb = struct.pack("<IIIII", 0, units >> 32, units & 0xFFFFFFFF, len(cut), len(data)) + cut
        parts.append(_block(6, epb))
    path.write_bytes(b"".join(parts))
    return path
