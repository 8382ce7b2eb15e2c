"""The sequence-over-time plot from (time, seq) arrays of any source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from nestbed.simulate import SeqTrace, plot_sequence, read_tcp_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_retransmissions_are_the_repeated_sequence_numbers() -> None:
    trace = SeqTrace.of("x", ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 2, 4]))
    assert list(trace.retransmitted) == [False, False, False, False, True, False]


def test_arrays_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="sent times and sequence numbers differ"):
        SeqTrace.of("x", ([0, 1], [0]))


def test_a_simulated_table_and_arrays_from_a_pcap_share_one_figure(tmp_path: Path) -> None:
    table = tmp_path / "ftp.csv"
    table.write_text(
        "t_s,event,seq\r\n1.0,send,0\r\n1.1,send,1\r\n1.15,drop,1\r\n1.2,ack,0\r\n"
        "1.5,send,1\r\n1.6,ack,1\r\n"
    )
    simulated = read_tcp_table(table, "ns-2")
    assert list(simulated.sent_seq) == [0, 1, 1]
    assert list(simulated.dropped_t_s) == [1.15]
    assert list(simulated.acked_seq) == [0, 1]
    # As a pcap gives them: byte sequence numbers relative to the initial one.
    emulated = SeqTrace.of("linux", (np.array([1.0, 1.1]), np.array([1, 1449])), unit="byte")
    out = plot_sequence([simulated, emulated], tmp_path / "plots" / "seq.png", title="one drop")
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    height, width, _ = imread(out).shape
    assert height > width / 2  # two panels, one above the other
