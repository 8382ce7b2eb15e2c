"""Loss at the paper's three points from counter snapshots taken around every burst (pure).

A: sender application → sender interface (the socket and qdisc: datagrams the application
tried to send that the interface never handled). B: sender interface → receiver interface (the
driver, the wire, the link emulator or switch). C: receiver interface → receiver application
(backlog, socket buffer). The three are counted against the datagrams the application tried to
send, so they add up to the end-to-end loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

STATISTICS = ("tx_packets", "tx_dropped", "tx_errors", "rx_packets", "rx_dropped", "rx_errors")
UDP_FIELDS = ("InDatagrams", "InErrors", "RcvbufErrors", "SndbufErrors")


def snapshot_command(interfaces: tuple[str, ...]) -> str:
    """A shell command printing `IF KEY VALUE` lines for INTERFACES, then /proc/net/snmp's UDP
    rows; run in a node, it reads that node's namespace."""
    keys = " ".join(STATISTICS)
    loops = " ".join(interfaces)
    return (
        f"for i in {loops}; do for k in {keys}; do "
        'echo "$i $k $(cat /sys/class/net/$i/statistics/$k)"; done; '
        "ethtool -S $i 2>/dev/null | awk -v i=$i "
        "'/drops?:/ {s += $2} END {print i, \"ethtool_drops\", s + 0}'; done; "
        "grep '^Udp:' /proc/net/snmp"
    )


@dataclass(frozen=True)
class Snapshot:
    """One node's counters at one moment: per interface, and the namespace's UDP counters."""

    interfaces: Mapping[str, Mapping[str, int]]
    udp: Mapping[str, int]

    def minus(self, before: Snapshot) -> Snapshot:
        """The counters' growth since BEFORE."""
        return Snapshot(
            interfaces={
                i: {k: v - before.interfaces.get(i, {}).get(k, 0) for k, v in c.items()}
                for i, c in self.interfaces.items()
            },
            udp={k: v - before.udp.get(k, 0) for k, v in self.udp.items()},
        )


def parse_snapshot(text: str) -> Snapshot:
    """Reads what ``snapshot_command`` printed."""
    interfaces: dict[str, dict[str, int]] = {}
    udp_rows: list[list[str]] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "Udp:":
            udp_rows.append(parts[1:])
        elif parts[0].endswith(":"):
            continue  # another protocol's rows of /proc/net/snmp (UdpLite)
        elif len(parts) == 3 and parts[2].lstrip("-").isdigit():
            interfaces.setdefault(parts[0], {})[parts[1]] = int(parts[2])
        else:
            raise ValueError(f"unexpected counter line {line!r}")
    udp: dict[str, int] = {}
    if len(udp_rows) >= 2:
        names, values = udp_rows[0], udp_rows[1]
        udp = {n: int(v) for n, v in zip(names, values, strict=True) if n in UDP_FIELDS}
    return Snapshot(interfaces=interfaces, udp=udp)


@dataclass(frozen=True)
class Loss:
    """One burst at one receiver: what each point saw and what was lost between them."""

    attempted: int  # sequence numbers the sender application used
    refused: int  # sends the kernel refused (ENOBUFS, ...)
    sender_interface: int  # datagrams the sender's interface handled (sent or dropped there)
    sender_dropped: int  # of those, dropped by the sender's driver (veth: the peer's backlog)
    receiver_interface: int  # datagrams the receiver's interface received
    receiver_dropped: int  # the receiver interface's rx_dropped
    received: int  # distinct datagrams the receiver application read
    rcvbuf_errors: int  # the receiver namespace's UDP RcvbufErrors
    in_errors: int  # the receiver namespace's UDP InErrors (RcvbufErrors included)
    ethtool_drops: int  # the *drops fields of `ethtool -S` at both interfaces (veth: per queue)
    a: int
    b: int
    c: int

    @property
    def total(self) -> int:
        return self.attempted - self.received

    def pct(self, point: str) -> float:
        value = self.total if point == "total" else getattr(self, point)
        return 100.0 * value / self.attempted if self.attempted else 0.0

    def as_row(self) -> dict[str, int | float]:
        row: dict[str, int | float] = {f.name: getattr(self, f.name) for f in fields(self)}
        row["total"] = self.total
        for point in ("a", "b", "c", "total"):
            row[f"loss_{point}_pct"] = self.pct(point)
        return row


def attribute(
    *,
    attempted: int,
    refused: int,
    received: int,
    sender: Snapshot,
    sender_if: str,
    receiver: Snapshot,
    receiver_if: str,
) -> Loss:
    """Loss of one burst from the growth of the counters over it (``Snapshot.minus``).

    The sender's interface handled tx_packets + tx_dropped: a datagram the driver drops was
    still handed to the interface, so it is lost at B, not A (tcpdump on the interface, the
    paper's log, sees it too).
    """
    s = sender.interfaces[sender_if]
    r = receiver.interfaces[receiver_if]
    handled = s["tx_packets"] + s["tx_dropped"]
    arrived = r["rx_packets"]
    return Loss(
        attempted=attempted,
        refused=refused,
        sender_interface=handled,
        sender_dropped=s["tx_dropped"],
        receiver_interface=arrived,
        receiver_dropped=r["rx_dropped"],
        received=received,
        rcvbuf_errors=receiver.udp.get("RcvbufErrors", 0),
        in_errors=receiver.udp.get("InErrors", 0),
        ethtool_drops=s.get("ethtool_drops", 0) + r.get("ethtool_drops", 0),
        a=attempted - handled,
        b=handled - arrived,
        c=arrived - received,
    )
