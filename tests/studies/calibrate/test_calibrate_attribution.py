"""Loss at A, B and C from counter snapshots, and the snapshot command's output read back."""

from __future__ import annotations

import pytest

from nestbed.studies.calibrate.attribution import (
    Snapshot,
    attribute,
    parse_snapshot,
    snapshot_command,
)

SNMP = """Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: {in_} 0 {err} 5 {rcvbuf} 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0"""


def _text(tx: int, txd: int, rx: int, rxd: int, in_: int = 0, rcvbuf: int = 0) -> str:
    lines = [
        f"eth0 tx_packets {tx}", f"eth0 tx_dropped {txd}", "eth0 tx_errors 0",
        f"eth0 rx_packets {rx}", f"eth0 rx_dropped {rxd}", "eth0 rx_errors 0",
        "eth0 ethtool_drops 0",
    ]  # fmt: skip
    return "\n".join(lines) + "\n" + SNMP.format(in_=in_, err=rcvbuf, rcvbuf=rcvbuf)


def test_the_command_reads_every_counter_of_the_interfaces_and_udp():
    command = snapshot_command(("eth0", "eth1"))
    assert "for i in eth0 eth1;" in command
    for key in ("tx_packets", "tx_dropped", "rx_packets", "rx_dropped"):
        assert key in command
    assert "/proc/net/snmp" in command and "ethtool -S" in command


def test_a_snapshot_parses_interfaces_and_the_udp_row_not_udplite():
    snap = parse_snapshot(_text(10, 1, 20, 2, in_=7, rcvbuf=3))
    assert snap.interfaces["eth0"]["tx_packets"] == 10
    assert snap.interfaces["eth0"]["rx_dropped"] == 2
    assert snap.udp == {"InDatagrams": 7, "InErrors": 3, "RcvbufErrors": 3, "SndbufErrors": 0}


def test_a_garbled_line_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="unexpected counter line"):
        parse_snapshot("eth0 tx_packets\n")


def test_growth_between_snapshots():
    before = parse_snapshot(_text(100, 0, 50, 0, in_=10, rcvbuf=1))
    after = parse_snapshot(_text(1100, 3, 60, 0, in_=910, rcvbuf=101))
    grew = after.minus(before)
    assert grew.interfaces["eth0"]["tx_packets"] == 1000
    assert grew.interfaces["eth0"]["tx_dropped"] == 3
    assert grew.udp["RcvbufErrors"] == 100


def _grew(tx: int = 0, txd: int = 0, rx: int = 0, rcvbuf: int = 0) -> Snapshot:
    iface = {"tx_packets": tx, "tx_dropped": txd, "rx_packets": rx, "rx_dropped": 0}
    return Snapshot(interfaces={"eth0": iface}, udp={"RcvbufErrors": rcvbuf, "InErrors": rcvbuf})


def test_loss_lands_where_the_counters_say_and_adds_up():
    # 1000 tried; 10 never reached the interface; the driver dropped 5 (still handed to the
    # interface: B); 40 more vanished on the way; the socket buffer overflowed for 100.
    loss = attribute(
        attempted=1000, refused=10, received=845,
        sender=_grew(tx=985, txd=5), sender_if="eth0",
        receiver=_grew(rx=945, rcvbuf=100), receiver_if="eth0",
    )  # fmt: skip
    assert (loss.a, loss.b, loss.c) == (10, 45, 100)
    assert loss.total == loss.a + loss.b + loss.c == 155
    assert loss.pct("b") == pytest.approx(4.5)
    assert loss.pct("total") == pytest.approx(15.5)
    row = loss.as_row()
    assert row["rcvbuf_errors"] == 100 and row["loss_c_pct"] == pytest.approx(10.0)


def test_a_lossless_burst_is_zero_everywhere():
    loss = attribute(
        attempted=500, refused=0, received=500, sender=_grew(tx=500), sender_if="eth0",
        receiver=_grew(rx=500), receiver_if="eth0",
    )  # fmt: skip
    assert (loss.a, loss.b, loss.c, loss.total) == (0, 0, 0, 0)
