"""Probe datagrams read back from pcap files, as tcpdump writes them."""

from __future__ import annotations

import struct
from pathlib import Path

from nestbed.studies.calibrate import capture

PORT = 5001


def _frame(seq: int, burst: int, *, port: int = PORT, proto: int = 17, frag: int = 0) -> bytes:
    payload = struct.pack("!IH", seq, burst) + b"\x00" * 6 + b"\x00" * 38
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, frag, 64, proto, 0,
                     b"\x0a\x01\x01\x02", b"\x0a\x01\x01\x03")  # fmt: skip
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def _pcap(path: Path, frames: list[tuple[int, bytes]], nano: bool = True) -> Path:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    data = struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 96, 1)
    for t_ns, frame in frames:
        frac = t_ns % 1_000_000_000 if nano else (t_ns % 1_000_000_000) // 1000
        data += struct.pack("<IIII", t_ns // 1_000_000_000, frac, len(frame), len(frame)) + frame
    path.write_bytes(data)
    return path


def test_probes_are_found_by_burst_with_their_first_capture_time(tmp_path):
    path = _pcap(
        tmp_path / "a.pcap",
        [
            (5_000_000_001, _frame(0, 3)),
            (5_000_000_900, _frame(1, 3)),
            (5_000_001_000, _frame(1, 3)),  # a duplicate keeps the first time
            (6_000_000_000, _frame(0, 4)),
            (6_000_000_001, _frame(7, 4, port=9)),  # another port
            (6_000_000_002, _frame(8, 4, proto=6)),  # not UDP
            (6_000_000_003, _frame(9, 4, frag=0x0010)),  # a later fragment
        ],
    )
    found = capture.probes_by_burst(path, PORT)
    assert found == {3: {0: 5_000_000_001, 1: 5_000_000_900}, 4: {0: 6_000_000_000}}


def test_microsecond_captures_are_scaled_to_ns(tmp_path):
    path = _pcap(tmp_path / "u.pcap", [(2_000_123_000, _frame(0, 0))], nano=False)
    assert capture.probes_by_burst(path, PORT) == {0: {0: 2_000_123_000}}


def test_an_empty_or_missing_capture_has_no_probes(tmp_path):
    assert capture.probes_by_burst(tmp_path / "none.pcap", PORT) == {}


def test_tcpdump_is_asked_for_probe_headers_without_promiscuous_mode(tmp_path):
    argv = capture.tcpdump_argv("eth0", tmp_path / "x.pcap", PORT)
    assert argv[:3] == ["tcpdump", "-i", "eth0"]
    assert "-p" in argv and "--immediate-mode" in argv and argv[-3:] == ["dst", "port", "5001"]
    assert capture.kernel_drops("10 packets captured\n12 packets dropped by kernel\n") == 12
    assert capture.kernel_drops("nothing") is None
