"""TCP segment tables from captures: sends, ACKs, arrivals, and the drops between them."""

from __future__ import annotations

import socket
from pathlib import Path

import dpkt
import pandas as pd

from nestbed.results.segments import read_tcp, write_tcp_table
from nestbed.results.seqplot import read_tcp_table

SENDER, RECEIVER = "10.0.0.1", "10.0.0.2"
ISN = 1000
MSS = 100


def frame(src: str, sport: int, dst: str, dport: int, seq: int, ack: int, payload: int,
          flags: int = dpkt.tcp.TH_ACK) -> bytes:  # fmt: skip
    tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags,
                       data=b"x" * payload)  # fmt: skip
    ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=6, data=tcp)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip))


def write_pcap(path: Path, packets: list[tuple[float, bytes]]) -> Path:
    with path.open("wb") as f:
        writer = dpkt.pcap.Writer(f)
        for t, data in sorted(packets, key=lambda p: p[0]):
            writer.writepkt(data, ts=t)
    return path


def segment(k: int) -> int:
    return ISN + 1 + k * MSS


def transfer(tmp_path: Path, *, merged: bool = False) -> tuple[Path, Path]:
    """A control connection (port 4999) and a bulk one (5000): ten segments, the fourth lost
    once and resent after four duplicate ACKs; one more sent after the receiver's capture
    ended, which must not count as lost."""
    t0 = 100.0
    sent, arrived = [], []
    sent.append((t0, frame(SENDER, 4999, RECEIVER, 80, 50, 1, 37)))
    arrived.append((t0 + 0.005, frame(SENDER, 4999, RECEIVER, 80, 50, 1, 37)))
    sent.append((t0 + 0.01, frame(SENDER, 5000, RECEIVER, 80, ISN, 0, 0, dpkt.tcp.TH_SYN)))
    for k in range(10):
        t = t0 + 0.1 + 0.01 * k
        sent.append((t, frame(SENDER, 5000, RECEIVER, 80, segment(k), 1, MSS)))
        if k != 3:
            arrived.append((t + 0.005, frame(SENDER, 5000, RECEIVER, 80, segment(k), 1, MSS)))
            acked = min(k + 1, 3)  # ACKs stop at the missing fourth segment
            sent.append((t + 0.01, frame(RECEIVER, 80, SENDER, 5000, 1, segment(acked), 0)))
    resent = t0 + 0.215
    sent.append((resent, frame(SENDER, 5000, RECEIVER, 80, segment(3), 1, MSS)))
    arrived.append((resent + 0.005, frame(SENDER, 5000, RECEIVER, 80, segment(3), 1, MSS)))
    sent.append((resent + 0.01, frame(RECEIVER, 80, SENDER, 5000, 1, segment(10), 0)))
    sent.append((t0 + 0.5, frame(SENDER, 5000, RECEIVER, 80, segment(10), 1, MSS)))
    if merged:  # GRO at the receiver: two segments arrive as one
        arrived = arrived[:2] + [(t0 + 0.2, frame(SENDER, 5000, RECEIVER, 80, segment(0), 1,
                                                   2 * MSS))]  # fmt: skip
    return (write_pcap(tmp_path / "sender.pcap", sent),
            write_pcap(tmp_path / "receiver.pcap", arrived))  # fmt: skip


def table(tmp_path: Path, **kwargs: bool) -> pd.DataFrame:
    sender, receiver = transfer(tmp_path, **kwargs)
    path = tmp_path / "tcp" / "ftp.csv"
    assert write_tcp_table(path, [sender], [receiver], {SENDER}, [(RECEIVER, 80)], 100.0)
    return pd.read_csv(path)


def test_the_bulk_connection_is_followed_and_the_lost_segment_is_the_only_drop(tmp_path):
    t = table(tmp_path)
    sends = t[t.event == "send"]
    assert list(sends.seq) == [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 300, 1000]
    assert set(sends.bytes) == {MSS}  # not the control connection's 37 bytes
    drops = t[t.event == "drop"]
    assert list(drops.seq) == [300]
    assert drops.t_s.iloc[0] == sends.t_s.iloc[3]  # the first transmission, not the resent one
    assert list(t[t.event == "receive"].seq) == [0, 100, 200, 400, 500, 600, 700, 800, 900, 300]


def test_the_recovery_is_read_as_a_fast_retransmit_after_four_duplicate_acks(tmp_path):
    table(tmp_path)
    trace = read_tcp_table(tmp_path / "tcp" / "ftp.csv", "linux")
    assert trace.unit == "byte"
    [recovery] = trace.recoveries()
    assert recovery["seq"] == 300
    assert recovery["duplicate_acks"] == 6  # the ACKs of segments 5 to 10 ask for byte 300
    assert recovery["recovery"] == "fast retransmit"
    assert abs(recovery["resent_s"] - recovery["dropped_s"] - 0.085) < 1e-6


def test_merged_arrivals_give_no_drops_rather_than_false_ones(tmp_path):
    t = table(tmp_path, merged=True)
    assert (t.event == "drop").sum() == 0
    assert (t.event == "send").sum() == 12


def test_a_capture_cut_mid_packet_keeps_every_packet_with_whole_headers(tmp_path):
    sender, _ = transfer(tmp_path)
    whole = list(read_tcp(sender))
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(sender.read_bytes()[:-30])  # in the last payload: its length is known
    assert list(read_tcp(cut)) == whole
    cut.write_bytes(sender.read_bytes()[:-140])  # in the last Ethernet header
    assert list(read_tcp(cut)) == whole[:-1]


def test_captures_without_the_flow_write_nothing(tmp_path):
    sender, receiver = transfer(tmp_path)
    path = tmp_path / "none.csv"
    assert not write_tcp_table(path, [sender], [receiver], {"10.9.9.9"}, [(RECEIVER, 80)], 0)
    assert not path.exists()
