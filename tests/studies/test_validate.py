"""`nestbed validate` on real namespaces, small: the instrument measures what linkd was told.

Tolerances are loose (a busy 2-core CI machine); the accuracy figures themselves are
benchmarks (docs/benchmarks.md), not assertions.
"""

from __future__ import annotations

import json
import signal

import pytest

from nestbed.lifecycle import signals
from nestbed.studies import validate

pytestmark = pytest.mark.root

SMALL = validate.Settings(
    delays_ms=(20,),
    bandwidths_bps=(2_000_000,),
    losses=(0.1,),
    sizes=(1518,),
    delay_packets=300,
    pps={64: 10000, 1518: 1000},
    bandwidth_seconds=1.5,
    bandwidth_min_packets=50,
    loss_packets=5000,
    gilbert=((0.1, 3.0),),
    gilbert_packets=60000,
    jitter_ms=((10, 2),),
)


def test_validate_measures_the_configured_link(tmp_path):
    tables = validate.run(SMALL, tmp_path, lambda _: None)
    (delay,) = tables["delay"]
    # The median judges the link; the mean also carries what a busy host adds to a few
    # packets (CI: 43.3 ms), and is never below the configured round trip.
    assert abs(delay["rtt_median_ms"] - 40) < 1 and delay["packets"] == 300
    assert delay["rtt_ms"] >= 40
    (bandwidth,) = tables["bandwidth"]
    assert abs(bandwidth["measured_bps"] - 2_000_000) / 2_000_000 < 0.02
    (loss,) = tables["loss"]
    low, high = validate.wilson(
        round(loss["measured_loss"] * loss["packets"]), loss["packets"], z=4.0
    )
    assert low <= 0.1 <= high
    (ge,) = tables["gilbert_elliott"]
    assert abs(ge["measured_loss_rate"] - 0.1) < 0.03 and abs(ge["measured_burst_length"] - 3) < 0.6
    in_order, reordering = tables["jitter"]
    # Never early (below delay - jitter). In order, no packet overtakes another, which moves
    # the distribution up (median ≈ 10.7 ms for ±2 ms at 0.5 ms spacing); reordering, every
    # packet gets the uniform draw: median 10 ms, stdev 1.15 ms, plus what a busy host adds
    # (CI has moved every packet by up to 0.6 ms).
    assert in_order["min_ms"] >= 8 and in_order["reordered"] == 0
    assert reordering["min_ms"] >= 8 and reordering["reordered"] > 0
    assert 9.5 <= reordering["median_ms"] <= 11.2
    # The spread: the uniform's 1.15 ms, never none; above, one packet the host holds 40 ms
    # adds 2.3 ms to the stdev of 300 (seen: 2.59 on a quiet run), while a jitter twice the
    # configured one would give 2.3 and one of ±10 ms 5.8: the median and the floor above
    # judge the shape, this bound only a gross error.
    assert 0.8 <= reordering["stdev_ms"] <= 3.5
    for name in ("delay", "bandwidth", "loss", "gilbert_elliott"):
        assert (tmp_path / f"{name}.csv").read_text().count("\n") == 2
    assert (tmp_path / "jitter.csv").read_text().count("\n") == 3
    assert (tmp_path / "validate.json").exists()


def test_wilson_interval():
    low, high = validate.wilson(50, 1000)
    assert low < 0.05 < high and low > 0.03 and high < 0.075
    assert validate.wilson(0, 100)[0] == 0.0


def test_loss_bursts_from_a_receiver_log(tmp_path):
    log = tmp_path / "recv.csv"
    received = [0, 1, 4, 5, 6, 9]  # lost: 2-3 (burst 2), 7-8 (burst 2); 10 packets sent
    log.write_text(
        "seq,burst,send_ns,recv_ns,size,delay_ns\n" + "".join(f"{s},0,0,0,18,0\n" for s in received)
    )
    assert validate.loss_bursts(log, 10) == (0.4, 2.0)


def test_a_bench_stopped_by_a_signal_says_so_in_its_run(tmp_path):
    with pytest.raises(signals.Interrupted), validate.Bench(tmp_path):
        raise signals.Interrupted(signal.SIGTERM)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["outcome"] == "interrupted (SIGTERM)"
