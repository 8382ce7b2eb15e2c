"""Means with t intervals over repetitions, points, receivers, the knee, the binomial check."""

from __future__ import annotations

import math

import pytest

from nestbed.studies.calibrate import stats


def test_mean_and_t_interval():
    mean, half = stats.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    # t(0.975, 2) = 4.3027; sd 1; n 3
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert stats.mean_ci([5.0]) == (5.0, None)
    assert math.isnan(stats.mean_ci([])[0])


def test_knee_is_where_loss_stays_below_the_threshold_for_all_larger_sizes():
    curve = [(50, 80.0), (100, 30.0), (250, 0.5), (300, 0.0), (500, 0.0)]
    assert stats.knee(curve, 1.0) == 250
    # A bump above the threshold at a larger size moves the knee past it.
    assert stats.knee([(50, 0.0), (100, 5.0), (200, 0.0)], 1.0) == 200
    assert stats.knee([(50, 0.0), (100, 0.0)], 1.0) == 50
    assert stats.knee([(50, 0.0), (1200, 3.0)], 1.0) is None


def _row(rep, receiver, a, b, c, size=100, burst=1000):
    total = a + b + c
    return {
        "topology": "lan", "profile": "untuned", "size": size, "burst": burst, "rep": rep,
        "receiver": receiver, "loss_a_pct": a, "loss_b_pct": b, "loss_c_pct": c,
        "loss_total_pct": total, "owd_mean_us": 100.0 + rep, "rtt_mean_us": None,
    }  # fmt: skip


def test_points_count_repetitions_not_receivers():
    rows = [_row(0, "r1", 0, 0, 10), _row(0, "r2", 0, 0, 30), _row(1, "r1", 0, 0, 20),
            _row(1, "r2", 0, 0, 40)]  # fmt: skip
    (point,) = stats.points(rows)
    assert point["n"] == 2
    assert point["loss_c_pct"] == pytest.approx(25.0)  # reps: 20 and 30
    # t(0.975, 1) = 12.7062; the two repetitions' sd is √50
    assert point["loss_c_pct_ci95"] == pytest.approx(12.706205 * 5, rel=1e-5)
    assert math.isnan(point["rtt_mean_us"])  # no echoes came back
    per = {r["receiver"]: r for r in stats.receivers(rows)}
    assert per["r1"]["loss_total_pct"] == pytest.approx(15.0)
    assert per["r2"]["loss_total_pct"] == pytest.approx(35.0)


def test_knees_per_target_and_burst():
    rows = [_row(0, "r1", 0, 0, loss, size=size) for size, loss in ((50, 9.0), (200, 0.0))]
    (knee,) = stats.knees(stats.points(rows), 1.0)
    assert knee["knee_size"] == 200
    assert (knee["worst_size"], knee["worst_loss_pct"]) == (50, 9.0)


def test_binomial_interval_holds_the_rate_it_came_from():
    low, high = stats.binomial_interval(50, 1000)
    assert low < 0.05 < high
    assert stats.binomial_interval(0, 0) == (0.0, 1.0)
    low, high = stats.binomial_interval(0, 3000)
    assert low == 0.0 and high < 0.005
