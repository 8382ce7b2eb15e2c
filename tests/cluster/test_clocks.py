"""The clock offset estimator (pure, no root): the sample with the shortest round trip wins,
and a host further off than the cut links' delays tolerate gets one sentence."""

from __future__ import annotations

import pytest

from nestbed.backend.cluster.clocks import Offset, Sample, estimate, tolerance_s, warnings


def test_the_shortest_round_trip_gives_the_offset_and_half_of_it_the_error():
    # The host's clock runs 5 ms ahead; replies are delayed asymmetrically in slow samples.
    ahead_ns = 5_000_000
    samples = [
        Sample(t1_ns=0, host_ns=3_000_000 + ahead_ns, t4_ns=4_000_000),  # rtt 4 ms, skewed
        Sample(t1_ns=10_000_000, host_ns=10_100_000 + ahead_ns, t4_ns=10_200_000),  # 200 µs
        Sample(t1_ns=20_000_000, host_ns=20_900_000 + ahead_ns, t4_ns=21_000_000),  # 1 ms
    ]
    o = estimate(samples)
    assert o.offset_s == pytest.approx(5e-3)
    assert o.rtt_s == pytest.approx(200e-6) and o.error_s == pytest.approx(100e-6)
    assert o.samples == 3
    # The skewed sample alone would be 1 ms off: the estimator did not average it in.
    assert estimate(samples[:1]).offset_s == pytest.approx(6e-3)


def test_a_sample_whose_clock_went_backwards_is_ignored_and_none_is_an_error():
    back = Sample(t1_ns=10, host_ns=0, t4_ns=5)
    assert estimate([back, Sample(0, 100, 100)]).samples == 1
    with pytest.raises(ValueError):
        estimate([back])


def test_the_tolerance_is_a_tenth_of_the_smallest_cut_delay_never_below_60_us():
    assert tolerance_s([0.02, 0.005]) == pytest.approx(0.0005)
    assert tolerance_s([0.0001]) == pytest.approx(60e-6)
    assert tolerance_s([]) == pytest.approx(60e-6)


def test_only_a_host_beyond_the_tolerance_is_warned_about_counting_its_error():
    offsets = {
        "h1": Offset(offset_s=0.0, rtt_s=0.0002, samples=8),  # within 0.5 ms
        "h2": Offset(offset_s=-0.0004, rtt_s=0.0004, samples=8),  # 0.4 + 0.2 ms: may be beyond
        "h3": Offset(offset_s=0.003, rtt_s=0.0001, samples=8),
    }
    said = warnings(offsets, tolerated_s=0.0005)
    assert [s.split("'")[0] for s in said] == ["host h2", "host h3"]
    assert "+3.000 ms" in said[1] and "0.500 ms" in said[1]
