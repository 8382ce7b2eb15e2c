"""Probe datagrams read back from a pcap file (pure): per burst id, the first capture time of
every sequence number, so packets logged at each interface can be counted and matched, as the
paper's tcpdump traces were."""

from __future__ import annotations

import re
import struct
from collections import defaultdict
from pathlib import Path

_MAGIC = {0xA1B2C3D4: ("<", 1_000), 0xA1B23C4D: ("<", 1), 0xD4C3B2A1: (">", 1_000),
          0x4D3CB2A1: (">", 1)}  # fmt: skip
ETHERNET = 1


def tcpdump_argv(ifname: str, path: Path, port: int) -> list[str]:
    """tcpdump writing the probe datagrams to PORT seen on IFNAME: headers only (96 bytes hold
    Ethernet, IP, UDP and the probe header), nanosecond stamps, immediate mode (else the last
    block is lost at the end), and without promiscuous mode, so it changes nothing the
    interface accepts."""
    return [
        "tcpdump", "-i", ifname, "-w", str(path), "-U", "-s", "96", "-p", "-q",
        "--immediate-mode", "--time-stamp-precision", "nano", "-B", "16384",
        "udp", "dst", "port", str(port),
    ]  # fmt: skip


def kernel_drops(stderr: str) -> int | None:
    """tcpdump's 'N packets dropped by kernel' when it stops."""
    found = re.search(r"(\d+) packets? dropped by kernel", stderr)
    return int(found.group(1)) if found else None


def probes_by_burst(path: Path, port: int) -> dict[int, dict[int, int]]:
    """burst id → {sequence number: first capture time in ns (the capture's clock)}."""
    out: dict[int, dict[int, int]] = defaultdict(dict)
    data = path.read_bytes() if path.exists() else b""
    if len(data) < 24:
        return {}
    magic = struct.unpack("<I", data[:4])[0]
    if magic not in _MAGIC:
        raise ValueError(f"{path} is not a pcap file (magic {magic:#x})")
    order, scale = _MAGIC[magic]
    linktype = struct.unpack(order + "I", data[20:24])[0]
    if linktype != ETHERNET:
        raise ValueError(f"{path}: link type {linktype}, not Ethernet")
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack(order + "IIII", data[offset : offset + 16])
        frame = data[offset + 16 : offset + 16 + caplen]
        offset += 16 + caplen
        probe = _probe(frame, port)
        if probe is not None:
            seq, burst = probe
            out[burst].setdefault(seq, sec * 1_000_000_000 + frac * scale)
    return dict(out)


def _probe(frame: bytes, port: int) -> tuple[int, int] | None:
    """(seq, burst) of a probe datagram to PORT in an Ethernet frame, else None."""
    if len(frame) < 14 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    if len(ip) < 20 or ip[9] != 17 or struct.unpack("!H", ip[6:8])[0] & 0x1FFF:
        return None  # not UDP, or a later fragment (no UDP header)
    header = (ip[0] & 0x0F) * 4
    udp = ip[header:]
    if len(udp) < 8 + 12 or struct.unpack("!H", udp[2:4])[0] != port:
        return None
    seq, burst = struct.unpack("!IH", udp[8:14])
    return seq, burst
