"""nestbed-analyze against tcptrace (issue 7): RTT sample count, mean RTT and retransmissions
per transfer agree within 1 % on varied synthetic captures, on the definitions both share."""

from __future__ import annotations

import heapq
import json
import random
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dpkt
import pytest
from trace_synth import Scenario, records, simulate, write_pcap

from nestbed.analysis.runner import analyzer_binary
from nestbed.analysis.tcptrace import figures as tcptrace_figures
from nestbed.analysis.tcptrace import on_common_definition

START_S = 1_700_000_000.0
MSS = 1448


def tcptrace() -> str:
    """tcptrace is required, not optional: `make setup` installs it, so a missing one fails."""
    found = shutil.which("tcptrace")
    if found is None:
        pytest.fail(
            "tcptrace is not installed; `make setup` installs Debian's tcptrace package",
            pytrace=False,
        )
    return found


# ---- captures: several concurrent connections, delayed ACKs, jitter, loss, delay spikes ----


@dataclass(kw_only=True)
class Conn:
    """One connection, captured at its data sender. ``upload``: the client sends the data."""

    client: tuple[str, int]
    server: tuple[str, int]
    upload: bool = True
    start_s: float = 0.0
    size: int = 1_500_000
    window: int = 24  # segments in flight
    owd_s: float = 0.015  # one-way delay
    jitter_s: float = 0.004  # added to each packet, uniform (the path stays FIFO)
    loss: float = 0.0  # data segments dropped, retransmissions included
    spike: float = 0.0  # chance a data segment is held 0.35 s (a stall past the RTO)
    delack: bool = True  # ACK every second segment or after 40 ms; at once when out of order
    seed: int = 1


Packet = tuple[float, bool, int, int, int, int]  # t, from the data sender, seq, ack, flags, len


def conversation(c: Conn) -> list[Packet]:
    """The packets of ``c`` as a capture at the data sender sees them (NewReno-like sender with
    a fixed window: fast retransmit after 3 duplicate ACKs, partial-ACK retransmission, 0.25 s
    retransmission timeout)."""
    rng = random.Random(c.seed)
    syn, fin, ack_f, psh = dpkt.tcp.TH_SYN, dpkt.tcp.TH_FIN, dpkt.tcp.TH_ACK, dpkt.tcp.TH_PUSH
    isn_s, isn_r = rng.randrange(1 << 32), rng.randrange(1 << 32)
    out: list[Packet] = []
    events: list[tuple[float, int, str, int]] = []
    counter = iter(range(1 << 62))
    fwd_last = rev_last = 0.0

    def push(t: float, kind: str, value: int = 0) -> None:
        heapq.heappush(events, (t, next(counter), kind, value))

    def to_receiver(t: float, seq: int) -> None:
        nonlocal fwd_last
        if rng.random() < c.loss:
            return
        delay = c.owd_s + rng.uniform(0, c.jitter_s) + (0.35 if rng.random() < c.spike else 0)
        fwd_last = max(fwd_last, t + delay)
        push(fwd_last, "data", seq)

    def to_sender(t: float, ack: int) -> None:
        nonlocal rev_last
        rev_last = max(rev_last, t + c.owd_s + rng.uniform(0, c.jitter_s))
        push(rev_last, "ack", ack)

    t0 = c.start_s
    rtt0 = 2 * c.owd_s
    if c.upload:  # the data sender opens the connection
        out += [(t0, True, isn_s, 0, syn, 0), (t0 + rtt0, False, isn_r, isn_s + 1, syn | ack_f, 0)]
        t = t0 + rtt0 + 10e-6
        out.append((t, True, isn_s + 1, isn_r + 1, ack_f, 0))
    else:
        out += [(t0, False, isn_r, 0, syn, 0), (t0 + 10e-6, True, isn_s, isn_r + 1, syn | ack_f, 0)]
        out.append((t0 + 10e-6 + rtt0, False, isn_r + 1, isn_s + 1, ack_f, 0))
        t = t0 + 2 * rtt0  # the client's request crosses first
    segments = [(o, min(MSS, c.size - o)) for o in range(0, c.size, MSS)]
    length = dict(segments)
    una = nxt = 0
    dupacks, recover, in_recovery, rto_token = 0, 0, False, 0
    rcv_nxt, ofo, pending, delack_token = 0, set(), 0, 0
    last_send = t

    def transmit(t: float, offset: int) -> None:
        nonlocal last_send
        last_send = max(t, last_send + 1e-6)
        n = length[offset]
        out.append((last_send, True, isn_s + 1 + offset, isn_r + 1, ack_f | psh, n))
        to_receiver(last_send, offset)

    def arm(t: float) -> None:
        nonlocal rto_token
        rto_token += 1
        push(t + 0.25, "rto", rto_token)

    def send(t: float) -> None:
        nonlocal nxt
        while nxt < c.size and nxt - una < c.window * MSS:
            transmit(t, nxt)
            nxt += length[nxt]
        if una < nxt:
            arm(t)

    send(t)
    fin_at = None
    while events:
        t, _, kind, value = heapq.heappop(events)
        if kind == "data":  # at the receiver
            in_order = value == rcv_nxt and not ofo
            if value == rcv_nxt:
                rcv_nxt += length[value]
                while rcv_nxt in ofo:
                    ofo.discard(rcv_nxt)
                    rcv_nxt += length[rcv_nxt]
            elif value > rcv_nxt:
                ofo.add(value)
            pending += 1
            if not c.delack or not in_order or pending >= 2:
                pending, delack_token = 0, delack_token + 1
                to_sender(t, rcv_nxt)
            else:
                delack_token += 1
                push(t + 0.040, "delack", delack_token)
        elif kind == "delack" and value == delack_token and pending:
            pending = 0
            to_sender(t, rcv_nxt)
        elif kind == "ack":  # at the sender, captured on arrival
            out.append((t, False, isn_r + 1, isn_s + 1 + value, ack_f, 0))
            if value > una:
                una, dupacks = value, 0
                if in_recovery and una < recover:
                    transmit(t + 10e-6, una)
                else:
                    in_recovery = False
                send(t + 10e-6)
                if una >= c.size and fin_at is None:
                    fin_at = max(t + 10e-6, last_send + 1e-6)
            elif value == una and una < nxt:
                dupacks += 1
                if dupacks == 3 and not in_recovery:
                    in_recovery, recover = True, nxt
                    transmit(t + 10e-6, una)
        elif kind == "rto" and value == rto_token and una < c.size:
            in_recovery, dupacks = False, 0
            transmit(t, una)
            arm(t)
    assert fin_at is not None, "the transfer did not finish"
    end = isn_s + 1 + c.size
    out.append((fin_at, True, end, isn_r + 1, fin | ack_f, 0))
    out.append((fin_at + rtt0, False, isn_r + 1, end + 1, fin | ack_f, 0))
    out.append((fin_at + rtt0 + 10e-6, True, end + 1, isn_r + 2, ack_f, 0))
    return out


def write_capture(path: Path, conns: list[Conn], *, snaplen: int = 65535) -> Path:
    """The connections' packets, merged in time order, as Ethernet/IPv4 in a pcap."""
    recs = []
    for c in conns:
        sender, receiver = (c.client, c.server) if c.upload else (c.server, c.client)
        for t, from_sender, seq, ack, flags, n in conversation(c):
            (src, sport), (dst, dport) = (sender, receiver) if from_sender else (receiver, sender)
            tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq & 0xFFFFFFFF,
                               ack=ack & 0xFFFFFFFF, flags=flags, win=65535, data=bytes(n))  # fmt: skip
            ip = dpkt.ip.IP(src=bytes(map(int, src.split("."))),
                            dst=bytes(map(int, dst.split("."))), p=dpkt.ip.IP_PROTO_TCP, data=tcp)  # fmt: skip
            eth = dpkt.ethernet.Ethernet(src=b"\x02\0\0\0\0\x01", dst=b"\x02\0\0\0\0\x02",
                                         type=dpkt.ethernet.ETH_TYPE_IP, data=ip)  # fmt: skip
            recs.append((START_S + t, bytes(eth)))
    recs.sort(key=lambda r: r[0])
    parts = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)]
    for t, data in recs:
        us = round(t * 1e6)
        cut = data[:snaplen]
        parts.append(struct.pack("<IIII", us // 1_000_000, us % 1_000_000, len(cut), len(data)))
        parts.append(cut)
    path.write_bytes(b"".join(parts))
    return path


def _synth(name: str, sc: Scenario) -> Callable[[Path], Path]:
    return lambda folder: write_pcap(folder / f"{name}.pcap", records(simulate(sc)))


def _conns(name: str, conns: list[Conn], snaplen: int = 65535) -> Callable[[Path], Path]:
    return lambda folder: write_capture(folder / f"{name}.pcap", conns, snaplen=snaplen)


C, S = ("10.0.0.1", 40000), ("10.0.0.2", 5001)
TRACES = {
    # tests/analysis/trace_synth.py: one transfer, every segment ACKed at once
    "clean": _synth("clean", Scenario()),
    "newreno_2pct_loss": _synth("newreno", Scenario(loss=0.02, reno=True, rwnd=262144, wscale=4)),
    "bottleneck_tail_drop": _synth(
        "bottleneck",
        Scenario(rate_bps=20e6, queue_packets=40, reno=True, rwnd=1 << 20, wscale=5, seed=3),
    ),
    # delayed ACKs, several connections at once, both directions, jitter
    "delayed_acks_3_conns": _conns(
        "delack",
        [
            Conn(client=C, server=S, seed=1),
            Conn(client=("10.0.0.3", 40001), server=S, upload=False, start_s=0.05, seed=2),
            Conn(client=("10.0.0.4", 40002), server=S, owd_s=0.040, jitter_s=0.02, seed=3),
        ],
    ),
    "delayed_acks_1pct_loss_snaplen_96": _conns(
        "delack_loss",
        [
            Conn(client=C, server=S, loss=0.01, seed=4, size=3_000_000),
            Conn(client=("10.0.0.3", 40001), server=S, upload=False, loss=0.02, seed=5),
        ],
        snaplen=96,
    ),
    # stalls past the retransmission timeout: spurious retransmissions of data that arrives
    "spurious_retransmissions": _conns(
        "spurious",
        [Conn(client=C, server=S, spike=0.003, delack=False, seed=6, size=3_000_000)],
    ),
}


# ---- the two tools' figures ----


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tcptrace")


@pytest.fixture(scope="module")
def reports(folder: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Each trace written once, with nestbed-analyze's report of it."""
    done = {}
    for name, make in TRACES.items():
        pcap = make(folder)
        out = subprocess.run([analyzer_binary(), str(pcap)], capture_output=True, text=True,
                             check=True)  # fmt: skip
        done[name] = (pcap, json.loads(out.stdout))
    return done


@pytest.mark.parametrize("name", list(TRACES))
def test_rtt_and_retransmissions_agree_with_tcptrace(
    name: str, folder: Path, reports: dict[str, tuple[Path, dict[str, Any]]]
) -> None:
    pcap, report = reports[name]
    theirs = tcptrace_figures(tcptrace(), pcap, folder / f"{name}-tcptrace")
    assert report["transfers"], "nestbed-analyze found no transfer"
    for t in report["transfers"]:
        key = (t["src"], t["sport"], t["dst"], t["dport"])
        what = f"{name}, transfer {key}"
        assert key in theirs, f"{what}: tcptrace has no such direction ({sorted(theirs)})"
        tt = theirs[key]
        assert t["data_segments"] == tt["data_segments"], what
        assert t["retransmitted_segments"] == pytest.approx(tt["retransmitted"], rel=0.01), what
        n, mean_s = on_common_definition(t, tt)
        assert t["rtt"]["count"] >= 100, f"{what}: too few samples to compare at 1 %"
        assert t["rtt"]["count"] == pytest.approx(n, rel=0.01), f"{what}: RTT samples"
        assert t["rtt"]["mean_s"] == pytest.approx(mean_s, rel=0.01), f"{what}: mean RTT"


def test_the_traces_hold_what_they_are_meant_to(
    reports: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """Guards the comparison against traces that lost their point: delayed ACKs (about one
    ACK per two segments), loss, truncation and spurious retransmissions are really there."""
    delack = reports["delayed_acks_3_conns"][1]
    assert len(delack["transfers"]) == 3
    data = sum(t["data_segments"] for t in delack["transfers"])
    assert delack["captures"][0]["tcp_segments"] - data < 0.7 * data
    lossy = reports["delayed_acks_1pct_loss_snaplen_96"][1]
    assert all(t["retransmitted_segments"] > 10 for t in lossy["transfers"])
    assert lossy["captures"][0]["truncated_payloads"] > 0
    # No loss configured: every retransmission is spurious, its original arrived.
    (spurious,) = reports["spurious_retransmissions"][1]["transfers"]
    assert spurious["retransmitted_segments"] > 5
