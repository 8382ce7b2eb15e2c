"""A sweep over a simulated link's shaping on one reused network (`--reuse-links`): each point
runs across the simulated link as its own parameters shape it, and starts with what the last
point's events did to it undone. Real namespaces and nestbed-sim."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from nestbed.sweep import execute
from nestbed.sweep.spec import from_flags

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("simulator")]

CORE_BPS = 10_000_000
PACKET_BYTES = 200  # CBR's payload; 228 bytes of IP, 266 on the simulated wire
SWEPT = """set ns [new Simulator]
source tb_compat.tcl
$ns rtproto Static
set opt(delay) 20ms
set h1 [$ns node]
set h2 [$ns node]
$ns make-simulated {
    set r1 [$ns node]
    set r2 [$ns node]
    set core [$ns duplex-link $r1 $r2 10Mb $opt(delay) DropTail]
    $ns duplex-link $h1 $r1 100Mb 0ms DropTail
    $ns duplex-link $h2 $r2 100Mb 0ms DropTail
}
set udp0 [new Agent/UDP]
$ns attach-agent $h1 $udp0
set null0 [new Agent/Null]
$ns attach-agent $h2 $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 set packetSize_ 200
$cbr0 set rate_ 160kb
$cbr0 attach-agent $udp0
$ns at 0.5 "$cbr0 start"
$ns at 2.5 "$cbr0 stop"
$ns at 3.0 "$core down"
$ns at 3.5 "$ns halt"
$ns run
"""


def _cbr(results: str) -> dict[str, str]:
    with (Path(results) / "traffic" / "flows.csv").open() as f:
        return next(row for row in csv.DictReader(f) if row["flow"] == "cbr0")


def test_each_point_crosses_the_simulated_link_as_its_parameters_shape_it(tmp_path):
    file = tmp_path / "swept.ns"
    file.write_text(SWEPT)
    sweep = from_flags(file, ["delay=40ms,5ms"], [], reuse_links=True)
    rows = {r["param.delay"]: r for r in execute.run_sweep(sweep, tmp_path / "sweep")}
    assert all(r["reused_network"] for r in rows.values()), rows
    serialization_ms = (PACKET_BYTES + 28 + 38) * 8 / CORE_BPS * 1e3
    cbr = {delay: _cbr(row["results"]) for delay, row in rows.items()}
    for delay, flow in cbr.items():
        print(delay, rows[delay]["outcome"], flow["packets_sent"], flow["packets_received"],
              flow["delay_mean_ms"])  # fmt: skip
    # The first point's 40 ms, then 5 ms on the same simulated link: were the link left as
    # the first point shaped it, the second would take 40 ms too.
    assert float(cbr["40ms"]["delay_mean_ms"]) >= 40 + serialization_ms
    assert 5 + serialization_ms <= float(cbr["5ms"]["delay_mean_ms"]) < 40
    # The first point ended with the core taken down; the second finds it up again.
    sent, received = int(cbr["5ms"]["packets_sent"]), int(cbr["5ms"]["packets_received"])
    assert sent > 0 and received >= 0.9 * sent
