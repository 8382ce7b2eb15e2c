"""The trace converter on hand-written and generated ns-2 traces (no ns-2 needed): how each
event is counted, and a trace far larger than what the converter keeps in memory."""

from __future__ import annotations

import heapq
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from nestbed.api import Experiment
from nestbed.errors import InternalError
from nestbed.model import Experiment as IR
from nestbed.simulate.trace import Converter


def two_nodes() -> IR:
    exp = Experiment("t")
    a, b = exp.node("a"), exp.node("b")
    exp.link(a, b, name="l", bandwidth="10Mb", delay="5ms")
    exp.agent("u", "udp", a)
    exp.agent("n", "null", b)
    exp.connect("u", "n")
    exp.application("c0", "cbr", "u", packet_size=1000, rate="4Mb")
    exp.at(1, "c0", "start")
    exp.at(3, "c0", "stop")
    return exp.build()


HEADER = [
    "#nb version 2.35",
    "#nb node 0 0",
    "#nb node 1 1",
    "#nb link 0 1",
    "#nb agent 0 Agent/UDP 0.0 0",
    "#nb agent 1 Agent/Null 1.0 0",
    "#nb start",
]


def line(event: str, t: float, frm: int, to: int, uid: int, size: int = 1000) -> str:
    return f"{event} {t:.15g} {frm} {to} cbr {size} ------- 0 0.0 1.0 {uid} {uid}"


def convert(exp: IR, lines: list[str], run: Path) -> tuple[Converter, list[dict]]:
    c = Converter(exp, run)
    c.feed(lines)
    return c, c.finish()


def test_each_kind_of_drop_is_counted_where_linkd_counts_it(tmp_path: Path) -> None:
    trace = [
        *HEADER,
        # 0: delivered; 1: dropped by the full queue; 2: lost before the queue (loss model);
        # 3: dropped by ordinal ("o"); 4: on the wire when the link goes down; 5: offered
        # while it is down.
        line("+", 1.0, 0, 1, 0), line("-", 1.0, 0, 1, 0), line("r", 1.0058, 0, 1, 0),
        line("+", 1.1, 0, 1, 1), line("d", 1.1, 0, 1, 1),
        line("d", 1.2, 0, 1, 2),
        line("o", 1.3, 0, 1, 3),
        line("+", 1.4, 0, 1, 4), line("-", 1.4, 0, 1, 4),
        line("d", 1.401, 0, 1, 4), "v 1.401 link-down 0 1",
        line("+", 1.5, 0, 1, 5), line("d", 1.5, 0, 1, 5),
        "#nb end 2.5 halted",
    ]  # fmt: skip
    c, rows = convert(two_nodes(), trace, tmp_path)
    table = pd.read_csv(tmp_path / "links" / "counters.csv")
    egress = table[(table.port == "a")].iloc[-1]
    assert egress.t_s == 2.5
    assert (egress.packets_in, egress.packets_out) == (6, 1)
    assert (egress.drops_queue, egress.drops_loss, egress.drops_other) == (1, 1, 3)
    assert (egress.queue_packets, egress.queue_bytes) == (0, 0)
    (flow,) = rows
    assert (flow["packets_sent"], flow["packets_received"]) == (6, 1)
    assert flow["loss"] == pytest.approx(5 / 6)
    assert flow["delay_mean_ms"] == pytest.approx(5.8)
    assert (flow["started_s"], flow["ended_s"]) == (1, 2.5)  # stopped at 3, after the end
    assert c.how == "halted" and not c.skipped


def test_packets_in_flight_at_the_end_are_not_counted_lost(tmp_path: Path) -> None:
    trace = [*HEADER, line("+", 1.0, 0, 1, 0), line("-", 1.0, 0, 1, 0), "#nb end 1.002 ended"]
    _, (flow,) = convert(two_nodes(), trace, tmp_path)
    assert (flow["packets_sent"], flow["packets_received"], flow["loss"]) == (1, 0, None)
    queue = pd.read_csv(tmp_path / "links" / "counters.csv")
    assert list(queue.t_s.drop_duplicates()) == [0, 1, 1.002]


def test_a_file_that_made_other_nodes_in_ns2_is_an_internal_error(tmp_path: Path) -> None:
    with pytest.raises(InternalError, match="ns-2 made 1 nodes but nestbed's front end 2"):
        convert(two_nodes(), ["#nb node 0 0", "#nb start"], tmp_path)


def generated(packets: int, interval: float = 0.002, delay: float = 0.0058) -> Iterator[str]:
    """A CBR trace of PACKETS packets, in time order, produced lazily."""
    sends = ((i * interval, i, "+-") for i in range(packets))
    arrivals = ((i * interval + delay, i, "r") for i in range(packets))
    yield from HEADER
    for t, uid, events in heapq.merge(sends, arrivals):
        for e in events:
            yield line(e, t, 0, 1, uid)
    yield f"#nb end {packets * interval + 1:.15g} halted"


def peak_memory(packets: int, run: Path) -> tuple[int, dict]:
    """The converter's peak memory (bytes, by tracemalloc) over a generated trace."""
    tracemalloc.start()
    try:
        c = Converter(two_nodes(), run)
        c.feed(generated(packets))
        (flow,) = c.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert c.lines == 3 * packets + len(HEADER) + 1
    return peak, flow


_PEAKS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_trace as t
short, _ = t.peak_memory(5_000, Path(sys.argv[2]) / "short")
long, flow = t.peak_memory(20_000, Path(sys.argv[2]) / "long")
print(json.dumps([short, long, flow]))
"""


def test_a_long_trace_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    """Four times the trace (60,000 lines, 3 MB) needs no more memory than one time. Measured
    in a process of its own: tracemalloc counts the allocations of every thread of the
    process, and in a fresh clone's full run the peak read 877 kB where alone it reads
    435 kB (a thread an earlier test left running, most likely)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PEAKS, str(Path(__file__).parent), str(tmp_path)],
                          capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    short, long, flow = json.loads(done.stdout.strip().splitlines()[-1])
    text_bytes = sum(len(x) + 1 for x in generated(20_000))
    assert long < 1.2 * short, f"peak {long} B for 20,000 packets, {short} B for 5,000"
    assert long < text_bytes / 5, f"peak {long} B for {text_bytes} B of trace"
    assert flow["packets_received"] == 20_000
    assert flow["delay_p99_ms"] == pytest.approx(5.8)
    series = pd.read_csv(tmp_path / "long" / "traffic" / "c0.csv")
    assert series.packets.sum() == 20_000 and set(series.packets.iloc[1:-1]) == {500}
